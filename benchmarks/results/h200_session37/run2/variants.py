"""Session 37 run 2: which of the sorted MoE path's row maps pay (library m45). Each variant replaces
QuantizedExperts.sorted_gemm and is timed by quant_moe_sorted_bench.layer (CUDA-graph replays, cold):
  unfused        session 36's path: x[order // top_k], silu_and_mul, y[position] (the GEMMs' outputs no longer
                 zero-filled: the kernel's spare blocks write the zeros)
  gather         x_rows = order (no x[order // top_k]), silu_and_mul, y[position]
  scatter        x[order // top_k], silu_and_mul, out_rows = order (no position scatter / y[position] gather)
  gather_scatter both maps, silu_and_mul kept
  all            both maps and SiLU-and-mul in the down GEMM's staging (m45's engine code)
`python3 variants.py` times them all; `python3 variants.py --profile VARIANT TOKENS` runs one layer for ncu.
A record of what ran: it needs m45's op, where silu=True meant SiLU-and-mul of the down call's input rows (dropped);
since run 5 silu=True is the gate/up call's SiLU-and-mul epilogue."""

import argparse
import sys

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402
from quant_moe_sorted_bench import MODELS, layer, stacks  # noqa: E402

from revolta_engine.layers.quant import QuantConfig  # noqa: E402
from revolta_engine.layers.quant_moe import QuantizedExperts  # noqa: E402
from revolta_kernels import ops, ops_hybrid, ops_quant  # noqa: E402


def make(gather: bool, scatter: bool, silu: bool):
    def sorted_gemm(self, x, weights, ids):
        gate_up, down = self._stacks()
        experts = gate_up.qweight.shape[0]
        tokens, top_k = ids.shape
        sorted_ids, order = torch.sort(ids.reshape(-1).to(torch.int16), stable=True)
        offsets = torch.searchsorted(sorted_ids, torch.arange(experts + 1, device=x.device, dtype=torch.int16))
        gu = (gate_up.qweight, gate_up.scales, gate_up.qzeros, gate_up.bits, gate_up.group_size, gate_up.zero_offset)
        dn = (down.qweight, down.scales, down.qzeros, down.bits, down.group_size, down.zero_offset)
        if gather:
            h = ops_quant.quant_moe_gemm(x, offsets, *gu, x_rows=order, x_row_div=top_k)
        else:
            h = ops_quant.quant_moe_gemm(x[order // top_k], offsets, *gu)
        a = h if silu else ops.silu_and_mul(h)
        if scatter:
            y = ops_quant.quant_moe_gemm(a, offsets, *dn, out_rows=order, silu=silu)
        else:
            y = ops_quant.quant_moe_gemm(a, offsets, *dn, silu=silu)
            position = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=x.device))
            y = y[position]
        return ops_hybrid.moe_combine(y.view(tokens, top_k, -1), weights.float(), None, None, None)
    return sorted_gemm


VARIANTS = {"unfused": make(False, False, False), "gather": make(True, False, False),
            "scatter": make(False, True, False), "gather_scatter": make(True, True, False),
            "all": make(True, True, True)}

ap = argparse.ArgumentParser()
ap.add_argument("--profile", nargs=2)
args = ap.parse_args()
if args.profile:
    name, tokens = args.profile[0], int(args.profile[1])
    QuantizedExperts.sorted_gemm = VARIANTS[name]
    e, hidden, inter, top_k = 256, 2048, 512, 8
    gen = torch.Generator(device="cuda").manual_seed(tokens)
    x = torch.randn(tokens, hidden, device="cuda", generator=gen).half()
    ids = torch.stack([torch.randperm(e, device="cuda", generator=gen)[:top_k] for _ in range(tokens)])
    weights = torch.rand(tokens, top_k, device="cuda", generator=gen).softmax(-1).half()
    experts = QuantizedExperts(0, hidden, inter, QuantConfig("awq", 4, 128), "profile")
    experts.stacked = stacks(e, hidden, inter)
    for _ in range(3):
        experts.sorted_gemm(x, weights, ids)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("profiled")
    experts.sorted_gemm(x, weights, ids)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    sys.exit(0)
ref = {}
for model in MODELS[:2]:
    for tokens in (8, 64, 256, 1024):
        line = f"{model[0]:18s} T={tokens:5d}"
        for name, fn in VARIANTS.items():
            QuantizedExperts.sorted_gemm = fn
            r = layer(*model, tokens, grouped=False)
            line += f"  {name} {r['sorted_us']:7.1f}"
            torch.cuda.empty_cache()
        print(line, flush=True)
