"""A small target for Nsight Compute: each decode-shape AWQ M=1 call (Llama-3.1-8B's qkv with the fused norm,
o, gate_up with the fused norm, down with the fused SiLU, and the 4096x14336 / 14336x4096 pair) launched
``--reps`` times on distinct weight copies. Usage: ncu --kernel-name regex:quant_gemv python this.py"""

from __future__ import annotations

import argparse

import torch

from revolta_kernels import ops_quant


def awq_weights(k: int, n: int):
    qweight = torch.randint(-(2**31), 2**31 - 1, (k // 8, n), dtype=torch.int32, device="cuda")
    qzeros = torch.full((k // 128, n // 8), -2004318072, dtype=torch.int32, device="cuda")
    scales = (torch.rand(k // 128, n, device="cuda") * 2e-3 + 1e-3).half()
    return qweight, scales, qzeros


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    shapes = [("qkv_norm", 4096, 6144, 2), ("o", 4096, 4096, 0), ("gate_up_norm", 4096, 28672, 2),
              ("down_silu", 14336, 4096, 1), ("up", 4096, 14336, 0), ("down", 14336, 4096, 0)]
    res = torch.randn(1, 4096, device="cuda").half()
    g = (torch.randn(4096, device="cuda") * 0.1 + 1).half()
    for label, k, n, act in shapes:
        ws = [awq_weights(k, n) for _ in range(args.reps)]
        x = torch.randn(1, 2 * k if act == 1 else k, device="cuda").half()
        for w in ws:
            if act == 0:
                ops_quant.quant_matmul(x, *w, 4, 128, 0)
            elif act == 1:
                ops_quant.quant_matmul_silu(x, *w, 4, 128, 0)
            else:
                ops_quant.quant_matmul_add_rms_norm(x, res, g, 1e-5, False, *w, 4, 128, 0)
        torch.cuda.synchronize()
        print(label, k, n, "done", flush=True)


if __name__ == "__main__":
    main()
