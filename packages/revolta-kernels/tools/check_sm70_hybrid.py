"""Volta (sm_70) check of the Gated DeltaNet and MoE kernels (gated delta rule, conv1d, gating, gated norm, MoE decode).

Like tools/check_sm70.py: compiles every instantiation csrc/gdn.cu and csrc/moe.cu launch with NVRTC 12.9 to compute_70
PTX, assembles it with ``ptxas -v`` (registers, spills, static shared memory) and disassembles it, then fails
if a kernel needs more than 96 KB of shared memory (static + the most dynamic memory the launcher allows) or
if its machine code has bf16 arithmetic (sm_70 has none; bf16 is storage only here).
Usage: ``python tools/check_sm70_hybrid.py [--out DIR]``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_sm70 import VOLTA_SMEM, Kernel, _pkg_dir, assemble, nvrtc_compile  # noqa: E402

CSRC = Path(__file__).resolve().parent.parent / "csrc"
TYPES = {"__half": "fp16", "__nv_bfloat16": "bf16", "float": "fp32"}
MOE_DYNAMIC_SMEM = 45 * 1024  # the launcher refuses more (H or K * I + Is floats, kMoeMaxSmemFloats)


def kernels() -> list[Kernel]:
    """Every instantiation gdn.cu and moe.cu launch."""
    ks: list[Kernel] = []
    for t, tn in TYPES.items():
        for dk in (64, 128):
            ks.append(Kernel(f"gdn decode dk{dk} {tn}", f"&revolta::gdn_decode_kernel<{t}, {dk}>", False))
            for conv in ("false", "true"):
                ks.append(Kernel(f"gdn fused decode{' +conv' if conv == 'true' else ''} dk{dk} {tn}",
                                 f"&revolta::gdn_decode_fused_kernel<{t}, {dk}, {conv}>", False))
            ks.append(Kernel(f"gdn prefill dk{dk} {tn}", f"&revolta::gdn_prefill_kernel<{t}, {dk}>", False))
        ks.append(Kernel(f"conv1d update {tn}", f"&revolta::conv1d_update_kernel<{t}>", False))
        ks.append(Kernel(f"conv1d prefill {tn}", f"&revolta::conv1d_prefill_kernel<{t}>", False))
        ks.append(Kernel(f"conv1d state {tn}", f"&revolta::conv1d_state_kernel<{t}>", False))
        ks.append(Kernel(f"gdn gating {tn}", f"&revolta::gdn_gating_kernel<{t}>", False))
        ks.append(Kernel(f"rms_norm_gated {tn}", f"&revolta::rms_norm_gated_kernel<{t}>", False))
        for name, kernel in (("up", "moe_up_kernel"), ("route+up", "moe_route_up_kernel"), ("down", "moe_down_kernel"),
                             ("router+norm", "moe_router_norm_kernel")):
            k = Kernel(f"moe {name} {tn}", f"&revolta::{kernel}<{t}>", False)
            k.smem_dynamic = MOE_DYNAMIC_SMEM
            ks.append(k)
        ks.append(Kernel(f"moe router {tn}", f"&revolta::moe_router_kernel<{t}>", False))
        # routing and combination around the quantized experts (moe_routing.cuh)
        ks.append(Kernel(f"moe topk softmax {tn}", f"&revolta::moe_topk_softmax_kernel<{t}>", False))
        ks.append(Kernel(f"moe combine {tn}", f"&revolta::moe_combine_kernel<{t}>", False))
    return ks


SOURCE = (b'#include "gdn_decode.cuh"\n#include "gdn_decode_fused.cuh"\n#include "gdn_prefill.cuh"\n'
          b'#include "conv1d.cuh"\n#include "moe.cuh"\n#include "moe_routing.cuh"\n')


def bf16_math(cubin: Path, ks: list[Kernel]) -> dict[str, int]:
    """Count of bf16 arithmetic instructions per kernel in the SASS (must be zero on sm_70)."""
    cuobjdump = _pkg_dir("triton") / "backends" / "nvidia" / "bin" / "cuobjdump"
    res = subprocess.run([str(cuobjdump), "-sass", str(cubin)], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"check_sm70_hybrid: cuobjdump failed:\n{res.stderr}")
    by_name = {k.lowered: k for k in ks}
    counts = {k.name: 0 for k in ks}
    current = None
    for line in res.stdout.splitlines():
        if m := re.search(r"Function : (\S+)", line):
            current = by_name.get(m.group(1))
        elif current is not None and re.search(r"\.BF16", line):
            counts[current.name] += 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, help="keep the PTX/cubin and write the table here")
    args = parser.parse_args()
    ks = kernels()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        cubin = assemble(nvrtc_compile(ks, "compute_70", SOURCE, "hybrid_sm70.cu", "check_sm70_hybrid"), ks, work)
        bf16 = bf16_math(cubin, ks)
    rows, failures = [], []
    for k in ks:
        smem = k.smem_static + k.smem_dynamic
        problems = [f"{bf16[k.name]} bf16 arithmetic instructions"] if bf16[k.name] else []
        if smem > VOLTA_SMEM:
            problems.append(f"{smem} B shared memory > 96 KB")
        note = f"ok (spills {k.spill} B to local memory)" if k.spill else "ok"
        rows.append(f"{k.name:30s} {k.registers:5d} {smem:9d} {k.spill:6d}  {'; '.join(problems) or note}")
        failures += [f"{k.name}: {p}" for p in problems]
    table = "\n".join([f"{'kernel (sm_70)':30s} {'regs':>5s} {'smem B':>9s} {'spill':>6s}  status", *rows])
    print(table)
    if args.out:
        (args.out / "sm70_hybrid_table.txt").write_text(table + "\n")
    if failures:
        print(f"\ncheck_sm70_hybrid: {len(failures)} problem(s):\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print(f"\ncheck_sm70_hybrid: {len(ks)} kernels compiled for sm_70; all within Volta's limits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
