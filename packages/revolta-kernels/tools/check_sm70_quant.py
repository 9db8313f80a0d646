"""Volta (sm_70) check of the quantized GEMM kernels (csrc/quant_gemm.cuh) and the skinny fp16 GEMV with and
without the fused add + RMSNorm (csrc/dense_gemv.cuh), like tools/check_sm70.py.

Compiles every instantiation the library launches with NVRTC 12.9 to compute_70 PTX, assembles it with
``ptxas -v`` and disassembles it with cuobjdump (the helpers of check_sm70.py), then fails if the
tensor-core GEMM has no HMMA instruction, an int8-activation GEMV has no IDP (dp4a) instruction, or a kernel needs
more than 96 KB of shared memory.
Usage: ``python tools/check_sm70_quant.py [--out DIR]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_sm70 import VOLTA_SMEM, Kernel, assemble, count_hmma, nvrtc_compile  # noqa: E402

CSRC = Path(__file__).resolve().parent.parent / "csrc"


GEMM_TILES = ((128, 128, 32, 2, 4), (128, 128, 32, 2, 2), (256, 128, 32, 4, 2), (128, 256, 32, 2, 4),
              (128, 128, 64, 2, 4))  # the variants launch_gemm() dispatches


def kernels() -> list[Kernel]:
    """Every instantiation quant_gemm.cu launches."""
    ks = []
    for bits in (4, 8):
        for v, tile in enumerate(GEMM_TILES):
            args = f"{bits}, {', '.join(map(str, tile))}"
            ks.append(Kernel(f"quant gemm int{bits} v{v} {tile[0]}x{tile[1]}x{tile[2]}",
                             f"&revolta::quant_gemm_kernel<{args}>", True, f"&revolta::quant_gemm_smem_bytes<{args}>"))
        for mt in (1, 2, 4, 8):
            for warps in (4, 8):
                for rows in (4, 8):
                    for defer in ("false", "true"):
                        ks.append(Kernel(f"quant gemv int{bits} m<={mt} w{warps} u{rows}{' defer' * (defer == 'true')}",
                                         f"&revolta::quant_gemv_kernel<{bits}, {mt}, {warps}, {rows}, {defer}>", False,
                                         f"&revolta::quant_gemv_max_smem<{bits}, {mt}, {warps}>"))
        for mt in (1, 2, 4, 8):  # the act-order (gathering) variant: 8 warps, deferred scale
            for rows in (4, 8):
                ks.append(Kernel(f"quant gemv int{bits} m<={mt} w8 u{rows} defer act-order",
                                 f"&revolta::quant_gemv_gather_kernel<{bits}, {mt}, {rows}>", False,
                                 f"&revolta::quant_gemv_max_smem<{bits}, {mt}, 8>"))
        for mt in (1, 2, 4, 8):  # int8 activations with dp4a (quant_gemv_xq.cuh): 8 warps, deferred scale
            for rows in (4, 8):
                for kernel, tag in (("quant_gemv_xq_kernel", ""), ("quant_gemv_gather_xq_kernel", " act-order")):
                    ks.append(Kernel(f"quant gemv int{bits} m<={mt} w8 u{rows} int8-x{tag}",
                                     f"&revolta::{kernel}<{bits}, {mt}, {rows}>", False,
                                     f"&revolta::quant_gemv_max_smem<{bits}, {mt}, 8>", dp4a=True))
        for mt in (1, 2):  # the co-resident variant (4 blocks per SM): 8 warps x 4 rows, deferred scale
            ks.append(Kernel(f"quant gemv int{bits} m<={mt} w8 u4 defer minb4",
                             f"&revolta::quant_gemv_co_kernel<{bits}, {mt}, 8, 4>", False,
                             f"&revolta::quant_gemv_max_smem<{bits}, {mt}, 8>"))
    for mt in (1, 2):  # the split-K-free int4 variant (quant_gemv_full.cuh)
        ks.append(Kernel(f"quant gemv full int4 m<={mt}", f"&revolta::quant_gemv_full_kernel<{mt}>", False,
                         f"&revolta::quant_gemv_full_max_smem<{mt}>"))
        ks.append(Kernel(f"quant gemv full int4 m<={mt} 16 columns", f"&revolta::quant_gemv_full_kernel<{mt}, 16>",
                         False, f"&revolta::quant_gemv_full_max_smem<{mt}>"))
        ks.append(Kernel(f"quant gemv full int4 m<={mt} 16 columns rope", f"&revolta::quant_gemv_full_kernel<{mt}, 16, true>",
                         False, f"&revolta::quant_gemv_full_max_smem<{mt}>"))
        for rope in ("false", "true"):  # int8 activations with dp4a (16 columns)
            ks.append(Kernel(f"quant gemv full int4 m<={mt} 16 columns{' rope' * (rope == 'true')} int8-x",
                             f"&revolta::quant_gemv_full_kernel<{mt}, 16, {rope}, false, true>", False,
                             f"&revolta::quant_gemv_full_max_smem<{mt}>", dp4a=True))
        for cols, rope in ((32, "false"), (16, "false"), (16, "true")):  # the act-order (gathering) instantiations
            ks.append(Kernel(f"quant gemv full int4 m<={mt} {cols} columns{' rope' * (rope == 'true')} act-order",
                             f"&revolta::quant_gemv_full_kernel<{mt}, {cols}, {rope}, true>", False,
                             f"&revolta::quant_gemv_full_gather_max_smem<{mt}>"))
    for mt in (1, 2, 4, 8):  # the skinny fp16 GEMV (dense_gemv.cuh), as dense_gemv.cu launches it
        for rows in (4,) if mt >= 8 else (4, 8):
            for warps in (4, 8):
                for act in ("false", "true"):
                    ks.append(Kernel(f"dense gemv m<={mt} r{rows} w{warps}{' silu' * (act == 'true')}",
                                     f"&revolta::dense_gemv_kernel<{mt}, {rows}, {warps}, {act}>", False, None))
            for warps in (4, 8):  # with the residual add + RMSNorm in front
                for v in ("", "2"):  # variant 2 stages M x K fp16 in dynamic shared memory (<= 80 KB, launcher)
                    ks.append(Kernel(f"dense gemv norm{v} m<={mt} r{rows} w{warps}",
                                     f"&revolta::dense_gemv_norm{v}_kernel<{mt}, {rows}, {warps}>", False, None))
    for bits in (4, 8):  # quantized MoE experts for few tokens (quant_moe.cuh)
        ks.append(Kernel(f"quant moe gemv int{bits}", f"&revolta::quant_moe_gemv_kernel<{bits}>", False,
                         "&revolta::quant_moe_max_smem"))
        for quads in (8, 16, 32):  # one token (quant_moe_gemv_one_token.cuh)
            ks.append(Kernel(f"quant moe one token int{bits} {4 * quads} columns",
                             f"&revolta::quant_moe_gemv_one_token_kernel<{bits}, {quads}>", False,
                             "&revolta::quant_moe_one_token_max_smem"))
        ks.append(Kernel(f"quant moe down + combine int{bits}", f"&revolta::quant_moe_down_combine_kernel<{bits}>",
                         False, "&revolta::quant_moe_combine_max_smem"))
        for tile in ("Wide", "Short"):
            for silu in ("false", "true"):  # true: the gate/up call's SiLU-and-mul epilogue
                ks.append(Kernel(f"quant moe gemm {tile.lower()} int{bits}{' silu' if silu == 'true' else ''}",
                                 f"&revolta::quant_moe_gemm_kernel<{bits}, revolta::MoeGemm{tile}, {silu}>", True,
                                 f"&revolta::quant_moe_gemm_smem_bytes<{bits}, revolta::MoeGemm{tile}>"))
    return ks


SOURCE = b'#include "quant_gemm.cuh"\n#include "quant_gemv_full.cuh"\n#include "dense_gemv.cuh"\n#include "dense_gemv_norm.cuh"\n#include "quant_moe.cuh"\n#include "quant_moe_gemv_one_token.cuh"\n#include "quant_moe_combine.cuh"\n#include "quant_moe_gemm.cuh"\n'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, help="keep the PTX/cubin and write the table here")
    args = parser.parse_args()
    ks = kernels()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        cubin = assemble(nvrtc_compile(ks, "compute_70", SOURCE, "quant_sm70.cu", "check_sm70_quant"), ks, work)
        count_hmma(cubin, ks)
    rows, failures = [], []
    for k in ks:
        smem = k.smem_static + k.smem_dynamic
        problems = ["claims tensor cores but has no HMMA"] if k.tensor_cores and k.hmma == 0 else []
        if k.dp4a and k.idp == 0:
            problems.append("claims dp4a but has no IDP")
        if smem > VOLTA_SMEM:
            problems.append(f"{smem} B shared memory > 96 KB")
        note = f"ok (spills {k.spill} B to local memory)" if k.spill else "ok"
        rows.append(f"{k.name:36s} {k.registers:5d} {smem:9d} {k.spill:6d} {k.hmma:6d}  {'; '.join(problems) or note}")
        failures += [f"{k.name}: {p}" for p in problems]
    table = "\n".join([f"{'kernel (sm_70)':36s} {'regs':>5s} {'smem B':>9s} {'spill':>6s} {'HMMA':>6s}  status", *rows])
    print(table)
    if args.out:
        (args.out / "sm70_quant_table.txt").write_text(table + "\n")
    if failures:
        print(f"\ncheck_sm70_quant: {len(failures)} problem(s):\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
