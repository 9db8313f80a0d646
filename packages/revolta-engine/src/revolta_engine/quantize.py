"""A small round-to-nearest (RTN) quantizer that writes AWQ ("GEMM") and GPTQ checkpoints.

It exists so the quantized path is tested end to end without downloading a checkpoint: it quantizes the
linear projections of an HF safetensors checkpoint group-wise, writes them in the chosen format (AutoAWQ's
column-interleaved packing, or GPTQ's K-packed weights with ``zero - 1`` zero points and ``g_idx``), and can
write the same model with the dequantized float weights, which a correct loader must reproduce exactly.
RTN is not GPTQ's error-compensating algorithm; only the file format is the same. With ``act_order`` the GPTQ
writer groups the input channels in a random order, as desc_act checkpoints do (one order per input: q/k/v
share theirs, as do gate/up), and stores the rows in their original order with ``g_idx`` naming each row's group.
"""

from __future__ import annotations

import json
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from revolta_engine.layers.quant.config import parse_quant_config
from revolta_engine.layers.quant.method import AWQ_ORDER
from revolta_kernels.reference.quant import pack_int32

# Llama-family attention and MLP projections, and the Gated DeltaNet ones that AWQ/GPTQ quantizers quantize (its
# small in_proj_b / in_proj_a stay in fp16, as theirs leave them)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
               "in_proj_qkv", "in_proj_z", "out_proj")
_COPIED = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
           "chat_template.jinja")


@dataclass
class QuantizedMatrix:
    """Integer weights ``q`` ``[K, N]``, zero points ``z`` and fp16 scales ``s`` ``[K / G, N]``; ``g_idx`` ``[K]``:
    each row's group (None: row k is in group k // G)."""

    q: torch.Tensor
    z: torch.Tensor
    s: torch.Tensor
    group_size: int
    g_idx: torch.Tensor | None = None

    def groups(self) -> torch.Tensor:
        """Each row's group as int64 ``[K]``."""
        if self.g_idx is not None:
            return self.g_idx.long()
        return torch.arange(self.q.shape[0]) // self.group_size

    def dequantized(self) -> torch.Tensor:
        """The float32 weight in torch's ``[N, K]`` layout (exact: small integers times fp16 scales)."""
        g = self.groups()
        return ((self.q - self.z[g]).float() * self.s.float()[g]).t().contiguous()


def rtn_quantize(weight: torch.Tensor, bits: int, group_size: int, sym: bool, min_zero: int = 0,
                 order: torch.Tensor | None = None) -> QuantizedMatrix:
    """Quantize a ``[N, K]`` weight group-wise along K (``group_size`` -1: one group per row).

    ``min_zero`` keeps zero points at or above it (GPTQ v1 stores ``zero - 1``, so 1 there). ``order`` (a
    permutation of K, act-order) forms the groups from the input channels taken in that order; the rows stay in
    their original order and ``g_idx`` names each one's group.
    """
    if order is not None:
        m = rtn_quantize(weight[:, order], bits, group_size, sym, min_zero)
        inverse = torch.argsort(order)
        return QuantizedMatrix(m.q[inverse], m.z, m.s, m.group_size, m.groups()[inverse].to(torch.int32))
    w = weight.detach().float().t()  # [K, N]
    k, n = w.shape
    group = k if group_size == -1 else group_size
    if k % group:
        raise ValueError(f"input size {k} is not a multiple of the group size {group}")
    maxq = (1 << bits) - 1
    grouped = w.reshape(k // group, group, n)
    if sym:
        absmax = grouped.abs().amax(1).clamp(min=1e-8)
        s = (2 * absmax / maxq).half()
        z = torch.full_like(absmax, 1 << (bits - 1), dtype=torch.int64)
    else:
        lo, hi = grouped.amin(1).clamp(max=0), grouped.amax(1).clamp(min=0)
        s = ((hi - lo).clamp(min=1e-8) / maxq).half()
        z = torch.round(-lo / s.float()).long().clamp(min_zero, maxq)
    q = torch.round(grouped / s.float().unsqueeze(1)) + z.unsqueeze(1)
    q = q.clamp(0, maxq).long().reshape(k, n)
    return QuantizedMatrix(q, z, s, group)


def to_awq(m: QuantizedMatrix) -> dict[str, torch.Tensor]:
    """AutoAWQ GEMM tensors: ``qweight`` ``[K, N / 8]``, ``qzeros`` ``[K / G, N / 8]``, ``scales``."""
    def interleave(v: torch.Tensor) -> torch.Tensor:
        return pack_int32(v.view(v.shape[0], -1, 8)[..., list(AWQ_ORDER)].reshape(v.shape), 4, 1)

    return {"qweight": interleave(m.q), "qzeros": interleave(m.z), "scales": m.s}


def to_gptq(m: QuantizedMatrix, bits: int) -> dict[str, torch.Tensor]:
    """GPTQ (v1) tensors: ``qweight`` ``[K / pack, N]``, ``qzeros`` (``zero - 1``), ``scales``, ``g_idx``."""
    return {"qweight": pack_int32(m.q, bits, 0), "qzeros": pack_int32(m.z - 1, bits, 1), "scales": m.s,
            "g_idx": m.groups().to(torch.int32)}


def _act_order(prefix: str, k: int) -> torch.Tensor:
    """The channel order of projection ``prefix``'s input: one per input (q/k/v share one, gate/up another)."""
    owner, _, leaf = prefix.rpartition(".")
    shared = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "gate_up", "up_proj": "gate_up",
              "in_proj_qkv": "in_proj", "in_proj_z": "in_proj"}
    key = f"{owner}.{shared[leaf]}" if leaf in shared else prefix
    return torch.randperm(k, generator=torch.Generator().manual_seed(zlib.crc32(key.encode())))


def _read_all(src: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for f in sorted(src.glob("*.safetensors")):
        with safe_open(str(f), "pt") as fh:
            tensors.update({name: fh.get_tensor(name) for name in fh.keys()})  # noqa: SIM118
    return tensors


def quantize_checkpoint(src: str | Path, dst: str | Path, method: str, bits: int = 4, group_size: int = 128,
                        sym: bool = False, act_order: bool = False,
                        dequantized_dst: str | Path | None = None, dynamic: dict | None = None) -> Path:
    """Write ``src`` (an HF safetensors checkpoint) quantized with RTN as ``method`` ("awq" or "gptq") to ``dst``.

    Projections (q/k/v/o, gate/up/down, the Gated DeltaNet's in_proj_qkv / in_proj_z / out_proj) are quantized;
    embeddings, norms and lm_head are copied. With ``dequantized_dst`` the same model with the dequantized weights
    is written there too. ``dynamic`` (GPTQ only): GPTQModel's per-module rules, written to the config and obeyed
    (``-:pattern`` keeps matching projections unquantized, ``+:pattern`` changes their bits / group size).
    """
    if method not in ("awq", "gptq") or (method == "awq" and bits != 4) or bits not in (4, 8):
        raise ValueError(f"cannot write {method} with {bits} bits (AWQ: 4; GPTQ: 4 or 8)")
    if act_order and method != "gptq":
        raise ValueError("act-order (desc_act) exists only in GPTQ checkpoints")
    if dynamic and method != "gptq":
        raise ValueError("per-module rules (dynamic) exist only in GPTQ checkpoints")
    qc: dict = {"quant_method": method, "bits": bits, "group_size": group_size}
    if method == "awq":
        qc.update(zero_point=True, version="gemm")
    else:
        qc.update(sym=sym, desc_act=act_order, checkpoint_format="gptq")
    if dynamic:
        qc["dynamic"] = dynamic
    rules = parse_quant_config(SimpleNamespace(quantization_config=qc))
    assert rules is not None
    src, dst = Path(src), Path(dst)
    config = json.loads((src / "config.json").read_text())
    out: dict[str, torch.Tensor] = {}
    dense: dict[str, torch.Tensor] = {}
    for name, tensor in _read_all(src).items():
        prefix, _, leaf = name.rpartition(".")
        module = rules.for_module(prefix)
        if leaf != "weight" or prefix.rpartition(".")[2] not in PROJECTIONS or module is None:
            out[name] = dense[name] = tensor
            continue
        order = _act_order(prefix, tensor.shape[1]) if act_order else None
        m = rtn_quantize(tensor, module.bits, module.group_size, sym, min_zero=int(method == "gptq"), order=order)
        packed = to_awq(m) if method == "awq" else to_gptq(m, module.bits)
        out.update({f"{prefix}.{k}": v.contiguous() for k, v in packed.items()})
        dense[name] = m.dequantized().to(tensor.dtype)
    for path, tensors, quant in ((dst, out, qc), (dequantized_dst, dense, None)):
        if path is None:
            continue
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
        cfg = dict(config)
        if quant is not None:
            cfg["quantization_config"] = quant
        (path / "config.json").write_text(json.dumps(cfg, indent=2))
        for extra in _COPIED:
            if (src / extra).is_file():
                shutil.copy(src / extra, path / extra)
    return dst
