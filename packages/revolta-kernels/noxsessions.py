"""nox sessions of revolta-kernels, loaded by the repository's root noxfile. No GPU needed for either.

- ``kernels_sm70``: install Debian's CUDA 11.8 toolkit if no CUDA 11.x/12.x nvcc is there
  (tools/install_cuda118.sh, as root), build the Volta/Turing library (``librevolta_native_sm70.so``: sm_70 and
  sm_75 SASS, compute_70 PTX) in ``build/volta`` with ``ptxas -v`` reports, and check every kernel's SASS
  (tools/check_volta.py): HMMA where it claims tensor cores, IDP where it claims dp4a, no bf16 arithmetic, at most
  96 KB of shared memory; registers and spills listed.
- ``kernels_build``: build the wheel for ``REVOLTA_CUDA_ARCHS`` (default ``CI_ARCHS``) with ``uv build``, taking the
  Volta library from ``build/volta`` (built there first if ``kernels_sm70`` has not run; rebuilt if the sources
  changed), so one compile serves the check and the wheel. Checks that both libraries are inside, that the Volta
  one's fatbin holds sm_70, sm_75 and compute_70, that neither links libtorch or a shared cudart; reports sizes;
  installs the wheel into a fresh venv with no nvcc on the PATH and checks that it imports and that the loader,
  asked for compute capability 7.0, picks the Volta library and reads its archs.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import nox

_HERE = Path(__file__).resolve().parent
# Works both when imported from here and when the root noxfile exec()s this file (then __file__ is the
# root noxfile).
PKG = _HERE if (_HERE / "csrc").is_dir() else _HERE / "packages" / "revolta-kernels"
VOLTA_BUILD = PKG / "build" / "volta"  # the Volta library's CMake tree, shared by both sessions
VOLTA_LIB = "librevolta_native_sm70.so"
MODERN_LIB = "librevolta_native.so"
# CI compiles the modern library for sm_90 only: each modern arch adds minutes of a 2-core machine, and one is
# enough to check the two-library wheel; a release sets REVOLTA_CUDA_ARCHS="70;75;80;86;89;90".
CI_ARCHS = "70;75;90"
DEBIAN_NVCC = Path("/usr/lib/nvidia-cuda-toolkit/bin/nvcc")
PARALLEL = {"CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2)}


def _volta_toolkit(session: nox.Session) -> Path:
    """A CUDA 11.x/12.x nvcc (REVOLTA_VOLTA_NVCC, else Debian's CUDA 11.8, installed here when missing)."""
    named = os.environ.get("REVOLTA_VOLTA_NVCC")
    if named:
        return Path(named)
    if not DEBIAN_NVCC.is_file():
        session.run("bash", str(PKG / "tools" / "install_cuda118.sh"), external=True)
    return DEBIAN_NVCC


def _volta_build(session: nox.Session) -> Path:
    """Configure (once) and build the Volta library in VOLTA_BUILD; its directory (library and ptxas logs)."""
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    if not (VOLTA_BUILD / "CMakeCache.txt").is_file():
        session.run("cmake", "-S", str(PKG), "-B", str(VOLTA_BUILD), *generator, "-DCMAKE_BUILD_TYPE=Release",
                    external=True, env={"REVOLTA_CUDA_ARCHS": "70;75"})
    session.run("cmake", "--build", str(VOLTA_BUILD), external=True, env=PARALLEL)
    lib_dir = VOLTA_BUILD / "volta"
    if not (lib_dir / VOLTA_LIB).is_file():
        session.error(f"the Volta build left no {VOLTA_LIB} in {lib_dir} (see its configure output)")
    return lib_dir


@nox.session(venv_backend="none")
def kernels_sm70(session: nox.Session) -> None:
    """Build the Volta library with CUDA 11.8 and check every kernel's sm_70 / sm_75 SASS."""
    nvcc = _volta_toolkit(session)
    lib_dir = _volta_build(session)
    out = Path(tempfile.mkdtemp(prefix="revolta-volta-check-"))
    session.run(sys.executable, str(PKG / "tools" / "check_volta.py"), str(lib_dir), "--out", str(out),
                "--nvcc", str(nvcc), external=True)


def _cuobjdump(nvcc: Path, lib: Path, what: str) -> str:
    """``cuobjdump --list-<what>`` of ``lib`` with the toolkit of ``nvcc`` (Debian keeps it in /usr/bin)."""
    tool = next((d / "cuobjdump" for d in (nvcc.parent, Path("/usr/bin")) if (d / "cuobjdump").is_file()), None)
    res = subprocess.run([str(tool or "cuobjdump"), f"--list-{what}", str(lib)], capture_output=True, text=True)
    return res.stdout + res.stderr


def _check_libraries(session: nox.Session, wheel: Path, archs: str, nvcc: Path) -> None:
    """Both libraries in ``wheel`` as ``archs`` asks, the Volta one with sm_70/sm_75/compute_70, neither linking
    libtorch or a shared cudart; prints their sizes."""
    out = Path(tempfile.mkdtemp(prefix="revolta-wheel-"))
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        libs = {Path(n).name: n for n in names if n.endswith(".so")}
        for member in libs.values():
            zf.extract(member, out)
    want = [VOLTA_LIB] * any(a in ("70", "72", "75") for a in archs.split(";"))
    want += [MODERN_LIB] * any(a.isdigit() and int(a) >= 80 for a in archs.split(";"))
    if sorted(libs) != sorted(want):
        session.error(f"the wheel holds {sorted(libs)}, expected {want}: {names}")
    session.log(f"{wheel.name}: {wheel.stat().st_size / 2**20:.1f} MiB; "
                + ", ".join(f"{n} {(out / m).stat().st_size / 2**20:.1f} MiB" for n, m in sorted(libs.items())))
    for name, member in sorted(libs.items()):
        so = out / member
        needed = subprocess.run(["objdump", "-p", str(so)], capture_output=True, text=True, check=True).stdout
        needed = "\n".join(ln for ln in needed.splitlines() if "NEEDED" in ln)
        if "torch" in needed or "libcudart" in needed:
            session.error(f"{name} must not link libtorch or a shared cudart:\n{needed}")
        session.log(f"{name} links only:\n{needed}")
    if VOLTA_LIB in libs:
        so = out / libs[VOLTA_LIB]
        elf, ptx = _cuobjdump(nvcc, so, "elf"), _cuobjdump(nvcc, so, "ptx")
        session.log(f"{VOLTA_LIB}:\n{elf}{ptx}")
        if ".sm_70.cubin" not in elf or ".sm_75.cubin" not in elf or ".sm_70.ptx" not in ptx:  # PTX: compute_70
            session.error(f"{VOLTA_LIB} lacks sm_70 / sm_75 cubins or compute_70 PTX")


# Run in the fresh venv: the loader asked for a V100 picks the Volta library, which loads and names its archs.
_FRESH_CHECK = """
import ctypes, shutil, sys
import revolta_kernels
from revolta_kernels import device_arch, native
assert shutil.which("nvcc") is None, "nvcc is on the PATH"
files = native._available()
name, why = device_arch.choose_library((7, 0), files)
assert name == device_arch.VOLTA_LIB, (name, why, files)
lib = ctypes.CDLL(str(files[name]))
lib.revolta_build_archs.restype = ctypes.c_char_p
archs = lib.revolta_build_archs().decode()
print(f"capability 7.0 -> {files[name]} (sm_{archs}): {why}")
assert archs == "70,75", archs
print("native_status():", revolta_kernels.native_status())
"""


@nox.session(venv_backend="none")
def kernels_build(session: nox.Session) -> None:
    """Build the two-library wheel (compile only), check its contents, install it into a fresh venv and load it."""
    archs = os.environ.get("REVOLTA_CUDA_ARCHS") or CI_ARCHS
    env = {"REVOLTA_CUDA_ARCHS": archs, **PARALLEL}
    nvcc = _volta_toolkit(session)
    if any(a in ("70", "72", "75") for a in archs.split(";")):
        env["REVOLTA_VOLTA_LIB"] = str(_volta_build(session) / VOLTA_LIB)
    wheel_dir = Path(tempfile.mkdtemp(prefix="revolta-kernels-wheel-"))
    session.run("uv", "build", "--package", "revolta-kernels", "--wheel", "-o", str(wheel_dir), external=True, env=env)
    wheels = sorted(wheel_dir.glob("revolta_kernels-*.whl"))
    if not wheels:
        session.error("no wheel was built")
    _check_libraries(session, wheels[-1], archs, nvcc)
    venv = wheel_dir / "venv"
    session.run("uv", "venv", "-q", "-p", sys.executable, str(venv), external=True)
    # the workspace's torch (from uv's cache), not whatever newer one the index has
    torch_pin = f"torch=={importlib.metadata.version('torch')}"
    session.run("uv", "pip", "install", "-q", "-p", str(venv / "bin" / "python"), str(wheels[-1]), torch_pin,
                external=True)
    bare = {"PATH": str(venv / "bin"), "REVOLTA_EMULATE_ARCH": "70"}  # Volta mode: the status names that library
    session.run(str(venv / "bin" / "python"), "-c", _FRESH_CHECK, external=True, env=bare)
