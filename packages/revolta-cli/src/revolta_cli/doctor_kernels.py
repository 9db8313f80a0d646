"""The kernels part of ``revolta doctor``: CUDA toolkits, driver, the native libraries and whether they fit the GPU."""

from __future__ import annotations

import ctypes
import glob
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

# Where nvcc lives: the PATH's, CUDA's default prefixes, Debian's nvidia-cuda-toolkit (CUDA 11.8).
NVCC_PLACES = ("/usr/local/cuda/bin/nvcc", "/usr/local/cuda-*/bin/nvcc", "/usr/lib/nvidia-cuda-toolkit/bin/nvcc",
               "/usr/bin/nvcc")


def nvcc_release(nvcc: str) -> str | None:
    """The CUDA release an nvcc reports (``"11.8"``), None when it does not run."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


def find_toolkits() -> dict[str, str | None]:
    """Every nvcc found (resolved path -> release), the PATH's first."""
    found: dict[str, str | None] = {}
    on_path = shutil.which("nvcc")
    for place in ([on_path] if on_path else []) + [p for pat in NVCC_PLACES for p in sorted(glob.glob(pat))]:
        real = os.path.realpath(place)
        if real not in found and os.access(real, os.X_OK):
            found[real] = nvcc_release(real)
    return found


def toolkit_lines(toolkits: Mapping[str, str | None]) -> list[tuple[str, str]]:
    """Report lines for the nvccs found: each one's release and which library it can build."""
    if not toolkits:
        return [("nvcc", "none found (the wheel's prebuilt kernels need none; building them does)")]
    lines = []
    for path, rel in toolkits.items():
        if rel is None:
            what = "does not run"
        else:
            major = int(rel.split(".")[0])
            what = (f"CUDA {rel}: " + ("builds the Volta library (sm_70/75) and sm_80+" if major < 13 else
                                       "builds the sm_80+ library (no sm_70/75)"))
        lines.append(("nvcc", f"{path}: {what}"))
    return lines


def library_archs(paths: Mapping[str, Path], read: Callable[[Path], str] | None = None) -> dict[str, str]:
    """File name -> the archs its ``revolta_build_archs()`` reports (or why it cannot say)."""
    def _read(path: Path) -> str:
        try:
            lib = ctypes.CDLL(str(path))
            lib.revolta_build_archs.restype = ctypes.c_char_p
            return lib.revolta_build_archs().decode()
        except (OSError, AttributeError) as exc:
            return f"unreadable ({exc})"

    return {name: (read or _read)(path) for name, path in paths.items()}


def match_lines(archs: Mapping[str, str], capabilities: list[tuple[int, int]] | None, emulated: int | None,
                loaded: str) -> list[tuple[str, str]]:
    """Report lines for the native libraries (name -> archs): their archs, which one each visible GPU gets, whether
    it has code for it, and the loaded one (``loaded``: native_status())."""
    from revolta_kernels.device_arch import choose_library, library_runs_on

    lines = [(f"  {name}", f"sm_{a.replace(',', ', sm_')}") for name, a in archs.items()] or [
        ("  libraries", "none installed (reference kernels only)")]
    if emulated is not None:
        lines.append(("Volta mode", f"REVOLTA_EMULATE_ARCH={emulated}: the Volta library and a V100's choices"))
    if not capabilities:
        lines.append(("GPU match", "no GPU visible: nothing to match (the libraries load, their kernels need a GPU)"))
    for i, cap in enumerate(capabilities or []):
        want = (emulated // 10, emulated % 10) if emulated is not None else cap
        name, why = choose_library(want, archs)
        fits = name is not None and library_runs_on(name, archs[name], want)
        lines.append((f"GPU {i} ({cap[0]}.{cap[1]})", f"{name or 'no library'}: "
                      f"{'has code for it' if fits else 'NO code for it'} ({why})"))
    lines.append(("loaded", loaded))
    return lines


def report(line: Callable[[str, object], None]) -> None:
    """Print the kernels' part of the doctor report through ``line(name, value)``."""
    for name, value in toolkit_lines(find_toolkits()):
        line(name, value)
    try:
        from revolta_kernels import device_arch, native, native_status
    except Exception as exc:  # report, do not crash: that is the point of doctor
        line("revolta-kernels", f"not importable: {exc}")
        return
    drivers = device_arch.driver_versions()
    line("driver", f"{drivers[0]} (supports CUDA {drivers[1]})" if drivers else "none (no NVIDIA driver or GPU)")
    caps, how = None, ""
    try:
        all_caps = device_arch.nvml_capabilities()
        raw = device_arch.envs.CUDA_VISIBLE_DEVICES.raw() if device_arch.envs.CUDA_VISIBLE_DEVICES.is_set() else None
        caps = device_arch.visible(all_caps, raw)
    except device_arch.NvmlError as exc:
        how = str(exc)
    line("revolta-kernels", "native libraries" + (f" (GPU query: {how})" if how else ""))
    archs = library_archs(native._available())
    for name, value in match_lines(archs, caps, device_arch.emulated_arch(), native_status()):
        line(name, value)
