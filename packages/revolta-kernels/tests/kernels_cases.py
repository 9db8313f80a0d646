"""Random problem builders shared by the CPU reference tests, the GPU tests and the benchmarks."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

import revolta_kernels

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
# The marks of a test module that needs a CUDA GPU and the native library (skipped, with the reason, otherwise).
NATIVE_GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not revolta_kernels.native_available(), reason=revolta_kernels.native_status()),
]


@dataclass
class AttnCase:
    """A paged-attention problem: inputs of the op plus the dense per-sequence K/V they encode."""

    query: torch.Tensor
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    block_tables: torch.Tensor
    context_lens: torch.Tensor
    query_start_loc: torch.Tensor
    max_query_len: int
    scale: float
    k_scales: torch.Tensor | None
    v_scales: torch.Tensor | None

    def args(self) -> tuple:
        return (
            self.query,
            self.key_cache,
            self.value_cache,
            self.block_tables,
            self.context_lens,
            self.query_start_loc,
            self.max_query_len,
            self.scale,
            self.k_scales,
            self.v_scales,
        )

    def reference(self) -> torch.Tensor:
        """The reference attention of this case (the oracle the kernels are compared with)."""
        from revolta_kernels import reference

        return reference.paged_attention(self.query, self.key_cache, self.value_cache, self.block_tables,
                                         self.context_lens, self.query_start_loc, self.scale, self.k_scales,
                                         self.v_scales)


def random_cache(
    num_blocks: int,
    num_kv_heads: int,
    block_size: int,
    head_dim: int,
    dtype: torch.dtype,
    device: str | torch.device,
    gen: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A cache filled with random values of ``dtype`` (int8 also gets random positive scales)."""
    shape = (num_blocks, num_kv_heads, block_size, head_dim)
    if dtype == torch.int8:
        q = torch.randint(-127, 128, shape, generator=gen, dtype=torch.int8)
        scales = torch.rand(shape[:3], generator=gen) * 0.02 + 0.002
        return q.to(device), scales.to(device)
    x = torch.randn(shape, generator=gen)
    return x.to(dtype).to(device), None


def make_attn_case(
    ctx_lens: list[int],
    q_lens: list[int],
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    kv_dtype: torch.dtype,
    device: str | torch.device = "cpu",
    q_dtype: torch.dtype = torch.float16,
    seed: int = 0,
    spare_blocks: int = 3,
) -> AttnCase:
    """Sequences with shuffled block tables over one random cache; query tokens are the last ``q_len``."""
    gen = torch.Generator().manual_seed(seed)
    per_seq = [(c + block_size - 1) // block_size for c in ctx_lens]
    max_blocks = max(per_seq) + 1
    num_blocks = sum(per_seq) + spare_blocks
    perm = torch.randperm(num_blocks, generator=gen)
    tables = torch.full((len(ctx_lens), max_blocks), 0, dtype=torch.int32)
    pos = 0
    for i, n in enumerate(per_seq):
        tables[i, :n] = perm[pos : pos + n].to(torch.int32)
        pos += n
    k, ks = random_cache(num_blocks, num_kv_heads, block_size, head_dim, kv_dtype, device, gen)
    v, vs = random_cache(num_blocks, num_kv_heads, block_size, head_dim, kv_dtype, device, gen)
    qsl = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0).tolist()), dtype=torch.int32)
    query = torch.randn(int(qsl[-1]), num_heads, head_dim, generator=gen).to(q_dtype)
    return AttnCase(
        query.to(device),
        k,
        v,
        tables.to(device),
        torch.tensor(ctx_lens, dtype=torch.int32).to(device),
        qsl.to(device),
        max(q_lens),
        head_dim**-0.5,
        ks,
        vs,
    )


def newest_slots(case: AttnCase) -> torch.Tensor:
    """The cache slot (block * block_size + offset, int64) of each sequence's last position, ctx - 1."""
    bs = case.key_cache.shape[2]
    last = case.context_lens.long() - 1
    rows = torch.arange(last.shape[0], device=last.device)
    return case.block_tables.long()[rows, last // bs] * bs + last % bs


def cos_sin_table(max_pos: int, rot_dim: int, device: str | torch.device = "cpu",
                  base: float = 10000.0) -> torch.Tensor:
    """A rotary cos/sin cache [max_pos, rot_dim] in float32 (cos halves, then sin halves), as the engine builds."""
    inv = 1.0 / (base ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim))
    freqs = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).float().to(device)


def dense_attention_f64(case: AttnCase) -> torch.Tensor:
    """Float64 attention computed token by token from the cache, independent of the reference's code."""
    kc, vc = case.key_cache.cpu(), case.value_cache.cpu()
    ks = None if case.k_scales is None else case.k_scales.cpu().double()
    vs = None if case.v_scales is None else case.v_scales.cpu().double()
    q = case.query.cpu().double()
    bs, hkv = kc.shape[2], kc.shape[1]
    group = q.shape[1] // hkv
    out = torch.zeros_like(q)
    qsl = case.query_start_loc.tolist()
    for b, ctx in enumerate(case.context_lens.tolist()):
        q0, q1 = qsl[b], qsl[b + 1]
        slots = [(int(case.block_tables[b, t // bs]), t % bs) for t in range(ctx)]
        blk = torch.tensor([s[0] for s in slots])
        off = torch.tensor([s[1] for s in slots])
        k = kc[blk, :, off].double()  # [ctx, hkv, D]
        v = vc[blk, :, off].double()
        if ks is not None:
            k = k * ks[blk, :, off].unsqueeze(-1)
            v = v * vs[blk, :, off].unsqueeze(-1)
        for i in range(q1 - q0):
            visible = ctx - (q1 - q0) + i + 1
            for h in range(q.shape[1]):
                kh, vh = k[:visible, h // group], v[:visible, h // group]
                p = torch.softmax((kh @ q[q0 + i, h]) * case.scale, dim=0)
                out[q0 + i, h] = p @ vh
    return out


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| in float64 (NaN anywhere gives inf)."""
    a64, b64 = a.double().cpu(), b.double().cpu()
    if not torch.isfinite(a64).all():
        return float("inf")
    return float((a64 - b64).norm() / b64.norm().clamp_min(1e-30))


def poison_allocator(mib: int = 512) -> None:
    """Fill freed caching-allocator blocks with NaN so an output a GPU kernel forgets to write shows."""
    blocks = [torch.empty(mib * 2**20 // 4 // 8, dtype=torch.float32, device="cuda").fill_(float("nan"))
              for _ in range(8)]
    del blocks


def random_expert_stacks(e: int, k: int, n: int, bits: int, group: int,
                         gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random stacked quantized experts on the GPU in the kernels' layout: qweight [e, k / pack, n] and qzeros
    [e, k / group, n / pack] of random bits, fp16 scales [e, k / group, n] in [1e-3, 1.1e-2) (drawn in that order)."""
    qweight = torch.randint(-(2**31), 2**31 - 1, (e, k * bits // 32, n), dtype=torch.int32, device="cuda",
                            generator=gen)
    qzeros = torch.randint(-(2**31), 2**31 - 1, (e, k // group, n * bits // 32), dtype=torch.int32, device="cuda",
                           generator=gen)
    scales = (torch.rand(e, k // group, n, device="cuda", generator=gen) * 0.01 + 1e-3).half()
    return qweight, scales, qzeros


def poison(numel: int) -> None:
    """Allocate and free ``4 * numel`` NaN floats, so the next outputs of about ``numel`` elements start as NaN in
    the caching allocator (an element a kernel forgets to write shows)."""
    torch.full((numel * 4,), float("nan"), device="cuda")


def random_quant_weight(k: int, n: int, bits: int, group: int,
                        gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(qweight, scales, qzeros)`` of a random kernel-layout int4/int8 ``[K, N]`` matrix on the GPU (every packed
    bit pattern possible, scales of 1e-3..1.1e-2), drawn from ``gen``."""
    qweight = torch.randint(-(2**31), 2**31 - 1, (k * bits // 32, n), dtype=torch.int32, device="cuda",
                            generator=gen)
    qzeros = torch.randint(-(2**31), 2**31 - 1, (k // group, n * bits // 32), dtype=torch.int32, device="cuda",
                           generator=gen)
    scales = (torch.rand(k // group, n, device="cuda", generator=gen) * 0.01 + 1e-3).half()
    return qweight, scales, qzeros
