"""Check the Volta/Turing library (``librevolta_native_sm70.so``) as built, kernel by kernel, on sm_70 and sm_75.

Reads what the CMake build left in its directory (``cmake/archs.cmake``): the library and ``ptxas/*.log``, the
``ptxas -v`` report of each object (registers, spills, static shared memory). Disassembles the library with
the CUDA 11.x/12.x ``cuobjdump`` and counts each kernel's HMMA (tensor cores), IDP (dp4a) and bf16 instructions.
The kernels of :mod:`volta_kernels` (every instantiation the launchers use) must all be in the library; each
one's dynamic shared memory is the ``__device__`` constant its launch uses, read from the PTX of a small
translation unit compiled with the same nvcc. Fails if a kernel that claims tensor cores has no HMMA, one that
claims dp4a has no IDP, any SASS holds bf16 arithmetic (sm_70 has none: bf16 is storage only), or a kernel needs
more than 96 KB of shared memory (Volta's per-block limit); registers and spills are listed.
Usage: ``python tools/check_volta.py BUILD_DIR [--out DIR] [--nvcc NVCC]``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from volta_kernels import UNITS, VOLTA_SMEM, Kernel  # noqa: E402

CSRC = Path(__file__).resolve().parent.parent / "csrc"
LIB = "librevolta_native_sm70.so"
ARCHS = ("70", "75")
TOOLKIT_DIRS = ("/usr/lib/nvidia-cuda-toolkit/bin", "/usr/bin")


@dataclass
class Measure:
    """What ptxas and the SASS say about one kernel on one arch."""

    registers: int = 0
    smem_static: int = 0
    spill: int = 0
    hmma: int = 0
    idp: int = 0
    bf16: int = 0


def _tool(name: str, nvcc: Path) -> str:
    """The CUDA tool ``name`` of the toolkit ``nvcc`` belongs to (Debian keeps it in /usr/bin)."""
    for d in (nvcc.parent, *map(Path, TOOLKIT_DIRS)):
        if (d / name).is_file():
            return str(d / name)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"check_volta: no {name} next to {nvcc} or on the PATH")
    return found


def _run(cmd: list[str], env: dict[str, str] | None = None) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise SystemExit(f"check_volta: {' '.join(cmd[:2])} failed:\n{res.stderr[-4000:]}")
    return res.stdout


def normalize(signature: str) -> str:
    """``revolta::name<args>`` of a demangled kernel symbol or a table expression: no return type, parameters,
    leading ``&``, integer suffixes or casts, single spaces, so both spellings of one instantiation compare equal."""
    s = signature.strip().lstrip("&")
    s = re.sub(r"^void\s+", "", s)
    depth, end = 0, len(s)
    for i, c in enumerate(s):  # cut the parameter list: the first '(' outside the template arguments
        depth += c == "<"
        depth -= c == ">"
        if c == "(" and depth == 0:
            end = i
            break
    s = s[:end].replace("(bool)1", "true").replace("(bool)0", "false")
    s = re.sub(r"\((?:unsigned |signed )?\w+\)(-?\d)", r"\1", s)  # (int)3 -> 3
    s = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", s)
    return re.sub(r"\s*([<>,])\s*", r"\1", s).replace(",", ", ")


def demangle(names: list[str], nvcc: Path) -> dict[str, str]:
    """Mangled symbol -> normalized demangled name."""
    filt = _tool("cu++filt", nvcc) if any((Path(d) / "cu++filt").is_file() for d in TOOLKIT_DIRS) else "c++filt"
    out = subprocess.run([filt], input="\n".join(names) + "\n", capture_output=True, text=True, check=True).stdout
    return {m: normalize(d) for m, d in zip(names, out.splitlines(), strict=True)}


def parse_ptxas(logs: list[Path]) -> dict[tuple[str, str], Measure]:
    """(mangled kernel, arch) -> registers, spills, static shared memory, from ptxas -v reports (the largest
    figures where several objects instantiate one kernel)."""
    found: dict[tuple[str, str], Measure] = {}
    for log in logs:
        key = None
        for line in log.read_text().splitlines():
            if m := re.search(r"Compiling entry function '([^']+)' for 'sm_(\d+)'", line):
                key = (m.group(1), m.group(2))
                found.setdefault(key, Measure())
            elif re.search(r"Function properties for ", line) and key is not None:
                name = line.split("Function properties for ")[1].strip()
                if name != key[0]:  # a non-inlined device function's frame: not the kernel's
                    key = None
            elif key is not None and (m := re.search(r"(\d+) bytes spill stores", line)):
                found[key].spill = max(found[key].spill, int(m.group(1)))
            elif key is not None and (m := re.search(r"Used (\d+) registers", line)):
                found[key].registers = max(found[key].registers, int(m.group(1)))
                if s := re.search(r"(\d+) bytes smem", line):
                    found[key].smem_static = max(found[key].smem_static, int(s.group(1)))
    return found


def scan_sass(lib: Path, archs: tuple[str, ...], nvcc: Path, found: dict[tuple[str, str], Measure]) -> None:
    """Count each kernel's HMMA, IDP and bf16 arithmetic instructions in the library's SASS of each arch (one
    cuobjdump per arch, run side by side)."""
    procs = {arch: subprocess.Popen([_tool("cuobjdump", nvcc), "-sass", "-arch", f"sm_{arch}", str(lib)],
                                    stdout=subprocess.PIPE, text=True) for arch in archs}
    with ThreadPoolExecutor(len(procs)) as pool:
        for arch, counts in zip(procs, pool.map(_count_sass, procs.values()), strict=True):
            if procs[arch].wait() != 0:
                raise SystemExit(f"check_volta: cuobjdump -sass -arch sm_{arch} {lib} failed")
            for name, (hmma, idp, bf16) in counts.items():
                m = found.setdefault((name, arch), Measure())
                m.hmma, m.idp, m.bf16 = hmma, idp, bf16


def _count_sass(proc: subprocess.Popen) -> dict[str, tuple[int, int, int]]:
    """Mangled kernel -> (HMMA, IDP, bf16) instruction counts in one cuobjdump -sass listing."""
    counts: dict[str, list[int]] = {}
    cur: list[int] | None = None
    assert proc.stdout is not None
    for line in proc.stdout:
        if "Function : " in line:
            cur = counts.setdefault(line.split("Function : ", 1)[1].strip(), [0, 0, 0])
        elif cur is None:
            continue
        elif "HMMA" in line:
            cur[0] += 1
        elif "IDP" in line:
            cur[1] += 1
        elif ".BF16" in line:
            cur[2] += 1
    return {name: (c[0], c[1], c[2]) for name, c in counts.items()}


def dynamic_smem(nvcc: Path, work: Path, env: dict[str, str]) -> dict[str, list[Kernel]]:
    """Every table's kernels with their dynamic shared memory read from the PTX of its probe unit."""
    tables = {}
    for unit in UNITS:
        ks = unit.kernels()
        src = work / f"{unit.name}_smem.cu"
        src.write_text(unit.source())
        ptx = work / f"{unit.name}_smem.ptx"
        _run([str(nvcc), "-ptx", "-arch=compute_70", "-std=c++17", "--expt-relaxed-constexpr", f"-I{CSRC}",
              str(src), "-o", str(ptx)], env)
        text = ptx.read_text()
        for i, k in enumerate(ks):
            if k.smem_expr:
                m = re.search(rf"\brevolta_smem_{i} = (\d+);", text)
                if not m:
                    raise SystemExit(f"check_volta: shared memory of {k.name} not found in {ptx}")
                k.smem_dynamic = int(m.group(1))
        tables[unit.name] = ks
    return tables


def problems_of(k: Kernel, m: Measure) -> list[str]:
    """What makes kernel ``k`` with measures ``m`` unfit for Volta (empty: nothing)."""
    problems = []
    if k.tensor_cores and m.hmma == 0:
        problems.append("claims tensor cores but has no HMMA")
    if k.dp4a and m.idp == 0:
        problems.append("claims dp4a but has no IDP")
    if m.bf16:
        problems.append(f"{m.bf16} bf16 arithmetic instructions")
    if m.smem_static + k.smem_dynamic > VOLTA_SMEM:
        problems.append(f"{m.smem_static + k.smem_dynamic} B shared memory > 96 KB")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build", type=Path, help=f"the Volta build directory (holds {LIB} and ptxas/)")
    parser.add_argument("--out", type=Path, help="write the tables here")
    parser.add_argument("--nvcc", type=Path, default=Path("/usr/lib/nvidia-cuda-toolkit/bin/nvcc"),
                        help="the CUDA 11.x/12.x nvcc that built the library (its cuobjdump disassembles it)")
    args = parser.parse_args()
    lib = args.build / LIB
    logs = sorted((args.build / "ptxas").glob("*.log"))
    if not lib.is_file() or not logs:
        raise SystemExit(f"check_volta: {args.build} holds no {LIB} or no ptxas/*.log (build it first)")
    env = dict(os.environ, PATH=f"{args.nvcc.parent}:{_tool('ptxas', args.nvcc).rsplit('/', 1)[0]}:"
                                f"{os.environ.get('PATH', '')}")
    found = parse_ptxas(logs)
    scan_sass(lib, ARCHS, args.nvcc, found)
    names = demangle(sorted({m for m, _ in found}), args.nvcc)
    by_name = {(names[m], a): meas for (m, a), meas in found.items()}
    with tempfile.TemporaryDirectory() as tmp:
        tables = dynamic_smem(args.nvcc, Path(tmp), env)
    failures: list[str] = []
    out_lines: list[str] = []
    for arch in ARCHS:
        rows, claimed = [], set()
        for ks in tables.values():
            for k in ks:
                key = (normalize(k.expr), arch)
                claimed.add(key[0])
                m = by_name.get(key)
                if m is None:
                    failures.append(f"sm_{arch} {k.name}: {key[0]} is not in the library")
                    continue
                problems = problems_of(k, m)
                note = f"ok (spills {m.spill} B)" if m.spill else "ok"
                rows.append((k, m, "; ".join(problems) or note))
                failures += [f"sm_{arch} {k.name}: {p}" for p in problems]
        others = sorted(n for (n, a), m in by_name.items() if a == arch and n not in claimed and m.registers)
        for n in others:  # kernels outside the tables: no claims to check, but still no bf16 and <= 96 KB static
            problems = problems_of(Kernel(n, n, False), by_name[(n, arch)])
            failures += [f"sm_{arch} {n}: {p}" for p in problems]
        out_lines += [f"{'kernel (sm_' + arch + ')':44s} {'regs':>5s} {'smem B':>8s} {'spill':>6s} {'HMMA':>5s} "
                      f"{'IDP':>4s}  status"]
        out_lines += [f"{k.name:44s} {m.registers:5d} {m.smem_static + k.smem_dynamic:8d} {m.spill:6d} {m.hmma:5d} "
                      f"{m.idp:4d}  {st}" for k, m, st in rows]
        ms = [m for _, m, _ in rows]
        spilled = [m.spill for m in ms if m.spill]
        out_lines += [
            f"sm_{arch}: {len(rows)} kernels checked ({len(others)} more in the library, outside the tables), "
            f"{sum(m.hmma > 0 for m in ms)} with HMMA, {sum(m.idp > 0 for m in ms)} with IDP, "
            f"{sum(m.bf16 for m in ms)} bf16 instructions, max shared memory "
            f"{max(m.smem_static + k.smem_dynamic for k, m, _ in rows)} B, max registers "
            f"{max(m.registers for m in ms)}, {len(spilled)} spill (max {max(spilled, default=0)} B)", ""]
    print("\n".join(out_lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "volta_table.txt").write_text("\n".join(out_lines) + "\n")
    if failures:
        print(f"check_volta: {len(failures)} problem(s):\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print(f"check_volta: {LIB} passes on sm_{', sm_'.join(ARCHS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
