"""nox sessions of revolta-kernels, loaded by the repository's root noxfile.

- ``kernels_sm70``: compile every kernel's device code for Volta (sm_70) with NVRTC 12.9 from PyPI, then
  ptxas -v and cuobjdump (tools/check_sm70.py); fails on a tensor-core kernel without HMMA, a dp4a kernel
  without IDP, bf16 arithmetic or more than 96 KB of shared memory. No GPU needed.
- ``kernels_build``: build the wheel with the local nvcc for sm_90 (compile only), check that the native
  library is inside, links no libtorch and no shared cudart, and loads with ctypes.
"""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path

import nox

_HERE = Path(__file__).resolve().parent
# Works both when imported from here and when the root noxfile exec()s this file (then __file__ is the
# root noxfile).
PKG = _HERE if (_HERE / "csrc").is_dir() else _HERE / "packages" / "revolta-kernels"

SM70_TOOLS = (
    "nvidia-cuda-nvrtc-cu12==12.9.86",
    "nvidia-cuda-runtime-cu12==12.9.79",
    "nvidia-cuda-nvcc-cu12==12.9.86",
    "triton==3.6.0",  # its cuobjdump (CUDA 12.8) still disassembles sm_70; triton >= 3.7 ships CUDA 13 tools
)


@nox.session(venv_backend="uv|virtualenv", reuse_venv=True)
def kernels_sm70(session: nox.Session) -> None:
    """Compile all kernels for sm_70 with NVRTC 12.9 and check registers, shared memory and HMMA use."""
    session.install(*SM70_TOOLS)
    out = Path(session.create_tmp()) / "sm70"
    session.run("python", str(PKG / "tools" / "check_sm70.py"), "--out", str(out))


@nox.session(venv_backend="uv|virtualenv", reuse_venv=True)
def kernels_build(session: nox.Session) -> None:
    """Build the revolta-kernels wheel for sm_90 with the local nvcc (no GPU needed) and inspect it."""
    session.install("scikit-build-core>=0.10", "pip")
    wheel_dir = Path(tempfile.mkdtemp(prefix="revolta-kernels-wheel-"))
    session.run(
        "python",
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(wheel_dir),
        str(PKG),
        env={"REVOLTA_CUDA_ARCHS": "90", "CMAKE_BUILD_PARALLEL_LEVEL": "2"},
    )
    wheels = sorted(wheel_dir.glob("revolta_kernels-*.whl"))
    if not wheels:
        session.error("no wheel was built")
    with zipfile.ZipFile(wheels[-1]) as zf:
        names = zf.namelist()
        lib = next((n for n in names if n.endswith("librevolta_native.so")), None)
        if lib is None:
            session.error(f"the wheel has no native library: {names}")
        zf.extract(lib, wheel_dir)
    so = wheel_dir / lib
    needed = session.run("sh", "-c", f"objdump -p {so} | grep NEEDED", silent=True, external=True) or ""
    if "torch" in needed or "libcudart" in needed:
        session.error(f"native library must not link libtorch or a shared cudart:\n{needed}")
    session.run(
        "python",
        "-c",
        "import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); lib.revolta_build_archs.restype = ctypes.c_char_p; "
        "archs = lib.revolta_build_archs().decode(); print('native library archs:', archs); "
        "sys.exit(0 if archs == '90' else 1)",
        str(so),
    )
