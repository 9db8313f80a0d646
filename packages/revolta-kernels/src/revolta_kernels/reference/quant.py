"""Reference for the quantized-weight GEMMs: unpack, dequantize, then a float32 matmul.

Kernel layout (what the engine repacks AWQ and GPTQ checkpoints into, once at load):

- ``qweight``: int32 ``[K / pack, N]`` with ``pack = 32 // bits``; row ``k`` of the weight is field
  ``k % pack`` (bits ``[(k % pack) * bits, ...)``) of ``qweight[k // pack, n]`` (packed along K, in order).
- ``scales``: ``[K / group_size, N]`` in the activation dtype.
- ``qzeros``: int32 ``[K / group_size, N / pack]``, packed along N in order (field ``n % pack``).
- the weight is ``W[k, n] = (q[k, n] - (z[k // group_size, n] + zero_offset)) * scales[k // group_size, n]``;
  ``zero_offset`` is 1 for GPTQ v1 checkpoints (which store ``zero - 1``) and 0 otherwise, so zero points
  stay 4 (or 8) bits wide in memory.

``y = x @ W`` with ``x: [..., K]``, ``y: [..., N]``.
"""

from __future__ import annotations

import torch

from revolta_kernels.reference.activation import silu_and_mul

SUPPORTED_BITS = (4, 8)


def _shifts(bits: int, device: torch.device) -> torch.Tensor:
    return torch.arange(0, 32, bits, device=device, dtype=torch.int32)


def unpack_int32(packed: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """Unpack ``32 // bits`` unsigned fields per int32 along ``dim`` (field ``i`` -> index ``j * pack + i``)."""
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, not {bits}")
    dim = dim % packed.dim()
    pack = 32 // bits
    moved = packed.movedim(dim, -1).to(torch.int32)
    fields = (moved.unsqueeze(-1) >> _shifts(bits, packed.device)) & ((1 << bits) - 1)
    out = fields.reshape(*moved.shape[:-1], moved.shape[-1] * pack)
    return out.movedim(-1, dim).contiguous()


def pack_int32(values: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """Inverse of :func:`unpack_int32`: pack unsigned ``bits``-wide values along ``dim`` into int32."""
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, not {bits}")
    dim = dim % values.dim()
    pack = 32 // bits
    moved = values.movedim(dim, -1).to(torch.int64)
    if moved.shape[-1] % pack:
        raise ValueError(f"dimension {dim} of size {moved.shape[-1]} is not a multiple of {pack}")
    if moved.numel() and (int(moved.min()) < 0 or int(moved.max()) >= 1 << bits):
        raise ValueError(f"values must lie in [0, {(1 << bits) - 1}]")
    fields = moved.reshape(*moved.shape[:-1], moved.shape[-1] // pack, pack)
    word = (fields << _shifts(bits, values.device).to(torch.int64)).sum(-1)
    word = torch.where(word >= 1 << 31, word - (1 << 32), word)  # two's complement into int32
    return word.to(torch.int32).movedim(-1, dim).contiguous()


def dequantize(qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor, bits: int, group_size: int,
               zero_offset: int = 0) -> torch.Tensor:
    """The float32 weight ``[K, N]`` of a kernel-layout quantized matrix."""
    if qweight.dtype != torch.int32 or qzeros.dtype != torch.int32:
        raise ValueError(f"qweight and qzeros must be int32 (packed {bits}-bit fields), got {qweight.dtype} and "
                         f"{qzeros.dtype}")
    q = unpack_int32(qweight, bits, 0).float()
    z = unpack_int32(qzeros, bits, 1).float() + zero_offset
    k, n = q.shape
    if scales.shape != (k // group_size, n) or k % group_size or z.shape != scales.shape:
        raise ValueError(f"inconsistent quantized shapes: qweight {tuple(qweight.shape)}, scales "
                         f"{tuple(scales.shape)}, qzeros {tuple(qzeros.shape)} for {bits} bits, group {group_size}")
    s = scales.float()
    return ((q.view(k // group_size, group_size, n) - z.unsqueeze(1)) * s.unsqueeze(1)).view(k, n)


INT8_ACTIVATION_MAX_ROWS = 8  # calls of at most this many rows (decode) take int8 activations; larger ones keep theirs


def int8_window(bits: int) -> int:
    """Channels that share one int8 activation scale: 64 with 4-bit weights, 32 with 8-bit ones."""
    return 64 if bits == 4 else 32


def round_activations_int8(a: torch.Tensor, bits: int) -> torch.Tensor:
    """``a`` with each row's windows of :func:`int8_window` consecutive channels rounded to int8 with one symmetric
    scale (amax / 127), computed in float32 and returned in ``a``'s dtype: the rounding of the skinny kernels' int8
    activations (whose windows are the kernel's K steps, at most this wide). All-zero windows stay zero."""
    window, k = int8_window(bits), a.shape[-1]
    af = torch.nn.functional.pad(a.float(), (0, (-k) % window)).unflatten(-1, (-1, window))
    scale = af.abs().amax(dim=-1, keepdim=True) / 127
    q = torch.where(scale > 0, torch.round(af / torch.where(scale > 0, scale, 1.0)).clamp(-127, 127) * scale, 0.0)
    return q.flatten(-2)[..., :k].to(a.dtype)


def activations(a: torch.Tensor, bits: int, int8_activations: bool) -> torch.Tensor:
    """What a quantized GEMM multiplies: ``a`` rounded by :func:`round_activations_int8` for an ``int8_activations``
    call of at most ``INT8_ACTIVATION_MAX_ROWS`` rows, else ``a`` itself."""
    rows = a.numel() // a.shape[-1] if a.shape[-1] else 0
    return round_activations_int8(a, bits) if int8_activations and rows <= INT8_ACTIVATION_MAX_ROWS else a


def quant_matmul(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor, bits: int,
                 group_size: int, zero_offset: int = 0) -> torch.Tensor:
    """``x @ dequantize(...)`` computed in float32, returned in ``x``'s dtype."""
    w = dequantize(qweight, scales, qzeros, bits, group_size, zero_offset)  # checks bits and the packed shapes
    if x.shape[-1] != w.shape[0]:
        raise ValueError(f"x has {x.shape[-1]} input channels but the {bits}-bit qweight {tuple(qweight.shape)} "
                         f"holds {w.shape[0]}")
    return (x.float() @ w).to(x.dtype)


def quant_moe_gemm(x: torch.Tensor, offsets: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
                   qzeros: torch.Tensor, bits: int, group_size: int, zero_offset: int = 0,
                   x_rows: torch.Tensor | None = None, x_row_div: int = 1, out_rows: torch.Tensor | None = None,
                   silu: bool = False) -> torch.Tensor:
    """Stacked quantized experts over ``R`` rows sorted by expert (a MoE prefill), ``[R, N]`` in ``x``'s dtype:
    sorted row ``r`` is expert ``e``'s for ``offsets[e] <= r < offsets[e + 1]`` and gives ``a[r] @ W[e]``; rows past
    ``offsets[E]`` give zeros. ``offsets``: int64 ``[E + 1]``, from 0, non-decreasing, at most ``R``.

    ``a[r]`` is ``x[x_rows[r] // x_row_div]`` (a gather: int64 ``x_rows [R]``; without it ``x[r]`` and ``R`` is
    ``x``'s row count). Row ``r``'s result is row ``out_rows[r]`` of the output (a scatter: ``out_rows`` a
    permutation of ``0 .. R - 1``; without it row ``r``). ``silu``: the experts' ``N`` columns are ``[gate, up]``
    halves and the result is ``silu_and_mul`` of the rows, ``[R, N / 2]``. One float32 matmul per expert
    (:func:`quant_matmul`)."""
    experts = qweight.shape[0]
    rows = x.shape[0] if x_rows is None else x_rows.numel()
    if silu and qweight.shape[-1] % 2:
        raise ValueError(f"silu needs [gate, up] column halves, got {qweight.shape[-1]} columns")
    bounds = offsets.tolist()
    if (offsets.dim() != 1 or len(bounds) != experts + 1 or bounds[0] != 0 or bounds[-1] > rows
            or any(a > b for a, b in zip(bounds, bounds[1:], strict=False))):
        raise ValueError(f"offsets must be {experts + 1} non-decreasing row offsets from 0 to at most {rows}, "
                         f"got {bounds if len(bounds) <= 16 else tuple(offsets.shape)}")
    a = x
    if x_rows is not None:
        if x_row_div < 1:
            raise ValueError(f"x_row_div must be at least 1, got {x_row_div}")
        src = x_rows.reshape(-1) // x_row_div
        if rows and (int(src.min()) < 0 or int(src.max()) >= x.shape[0]):
            raise ValueError(f"x_rows // {x_row_div} must index x's {x.shape[0]} rows, got {int(src.min())} .. "
                             f"{int(src.max())}")
        a = x[src]
    out = torch.zeros(rows, qweight.shape[-1], dtype=x.dtype, device=x.device)
    for e in range(experts):
        lo, hi = bounds[e], bounds[e + 1]
        if hi > lo:
            out[lo:hi] = quant_matmul(a[lo:hi], qweight[e], scales[e], qzeros[e], bits, group_size, zero_offset)
    if silu:
        out = silu_and_mul(out)
    if out_rows is None:
        return out
    dst = out_rows.reshape(-1)
    if dst.numel() != rows or not torch.equal(torch.sort(dst).values, torch.arange(rows, device=dst.device)):
        raise ValueError(f"out_rows must be a permutation of 0 .. {rows - 1} ({dst.numel()} values given)")
    return torch.empty_like(out).index_copy_(0, dst, out)


def quant_moe_matmul(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor,
                     ids: torch.Tensor, bits: int, group_size: int, zero_offset: int = 0, act: int = 0,
                     shared_id: int = -1) -> torch.Tensor:
    """Quantized experts of a mixture-of-experts layer, per routed (token, slot) row: ``out[t, k] = in[t, k] @
    W[ids[t, k]]`` with ``W[e]`` the kernel-layout expert ``e`` of the stacked ``qweight [E, K / pack, N]``,
    ``scales [E, K / G, N]``, ``qzeros [E, K / G, N / pack]``.

    ``act`` 0: ``in[t, k] = x[t]`` (``x [T, K]``); 1: ``in[t, k] = silu_and_mul(x[t, k])`` (``x [T, top_k, 2K]``,
    the gate/up output of that slot, rounded to ``x``'s dtype). Returns ``[T, top_k, N]`` in ``x``'s dtype; a row
    whose id names no expert is zeros. Each expert's rows are one float32 matmul (:func:`quant_matmul`).

    ``shared_id >= 0``: every token gets one more row, last, for expert ``shared_id`` (a shared expert stacked with
    the routed ones): ``[T, top_k + 1, N]``, and for act 1 ``x`` has that many slots.
    """

    if act not in (0, 1):
        raise ValueError(f"act must be 0 (x as it is) or 1 (silu_and_mul of x), not {act}")
    if shared_id >= 0:
        ids = torch.cat([ids, torch.full_like(ids[:, :1], shared_id)], 1)
    t, top_k = ids.shape
    if act == 1:
        inp = silu_and_mul(x).reshape(t * top_k, -1)
    else:
        inp = x.unsqueeze(1).expand(t, top_k, x.shape[-1]).reshape(t * top_k, -1)
    flat_ids = ids.reshape(-1)
    out = torch.zeros(t * top_k, qweight.shape[-1], dtype=x.dtype, device=x.device)
    for expert in torch.unique(flat_ids).tolist():
        if not 0 <= expert < qweight.shape[0]:
            continue
        rows = torch.nonzero(flat_ids == expert).squeeze(1)
        out[rows] = quant_matmul(inp[rows], qweight[expert], scales[expert], qzeros[expert], bits, group_size,
                                 zero_offset)
    return out.view(t, top_k, -1)


def quant_moe_down_combine(h: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor,
                           ids: torch.Tensor, weights: torch.Tensor, bits: int, group_size: int, zero_offset: int = 0,
                           shared_id: int = -1, x: torch.Tensor | None = None,
                           shared_gate: torch.Tensor | None = None) -> torch.Tensor:
    """A quantized MoE layer's down projections and weighted sum, ``[T, N]``: :func:`quant_moe_matmul` (act 1) of
    the gate/up rows ``h [T, R, 2K]``, then :func:`revolta_kernels.reference.moe.moe_combine` of the routed rows
    with the router's ``weights [T, top_k]`` and, when ``shared_id >= 0``, the shared expert's row (each token's
    last) gated by ``sigmoid(x @ shared_gate)``."""
    from revolta_kernels.reference.moe import moe_combine

    if shared_id >= 0 and (x is None or shared_gate is None):
        raise ValueError("quant_moe_down_combine: a shared expert's row needs x and shared_gate")
    rows = quant_moe_matmul(h, qweight, scales, qzeros, ids, bits, group_size, zero_offset, 1, shared_id)
    k = ids.shape[1]
    if shared_id < 0:
        return moe_combine(rows, weights, None, None, None)
    return moe_combine(rows[:, :k], weights, rows[:, k], x, shared_gate)
