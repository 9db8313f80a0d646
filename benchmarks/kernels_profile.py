"""One launch of each benchmark attention case, for running under Nsight Compute (ncu).

Usage: ncu --clock-control none --kernel-name regex:"paged_" --section SpeedOfLight ... \
       python3 benchmarks/kernels_profile.py
"""

from __future__ import annotations

import argparse

import torch
from kernels_bench import attn_inputs

from revolta_kernels import native_attention, ops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--prefill-variants", default="", help="only the 8K prefill, once per variant (e.g. 0,11,16)")
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.prefill_variants:
        q, kc, vc, tables, lens, qsl, _, scale, _, _ = attn_inputs(1, 8192, 8192, 32, 8, 128, 16, torch.float16)
        for v in (int(x) for x in args.prefill_variants.split(",")):
            native_attention.set_attention_variant(0, v)
            ops.paged_attention_prefill(q, kc, vc, tables, lens, qsl, 8192, scale, None, None)
            torch.cuda.synchronize()
        native_attention.set_attention_variant(0, 0)
        return
    for kv in (torch.float16, torch.int8):
        ops.paged_attention_decode(*attn_inputs(32, 4096, 1, 32, 8, 128, 16, kv))
        torch.cuda.synchronize()
    q, kc, vc, tables, lens, qsl, _, scale, _, _ = attn_inputs(1, 8192, 8192, 32, 8, 128, 16, torch.float16)
    ops.paged_attention_prefill(q, kc, vc, tables, lens, qsl, 8192, scale, None, None)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
