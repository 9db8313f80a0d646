"""Which native library fits the GPUs, without torch: the device query, Volta mode and the library choice.

The wheel carries two libraries: ``librevolta_native_sm70.so`` (sm_70/75 SASS by CUDA 11.8, plus compute_70 PTX
that every later driver compiles) and ``librevolta_native.so`` (sm_80 and newer by CUDA 13, plus PTX of its
highest arch). :func:`choose_library` is the pure rule; :func:`device_capability` asks NVML (no CUDA context, so
forked workers stay usable) for the lowest compute capability over the visible GPUs. ``REVOLTA_EMULATE_ARCH=70``
(Volta mode) makes :func:`effective_arch` report 70 on any GPU: the Volta library is loaded and every host-side
choice is the one a V100 makes.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable

from revolta_kernels import envs

VOLTA_LIB = "librevolta_native_sm70.so"
MODERN_LIB = "librevolta_native.so"


def choose_library(capability: tuple[int, int] | None, available_files: Iterable[str]) -> tuple[str | None, str]:
    """The library file (a name among ``available_files``) to load for a GPU of ``capability`` (None: no GPU
    visible) and why; None and why when none of them can run there."""
    have = {name.rsplit("/", 1)[-1] for name in available_files}
    volta, modern = VOLTA_LIB in have, MODERN_LIB in have
    if capability is None:
        pick = MODERN_LIB if modern else VOLTA_LIB if volta else None
        return pick, "no GPU visible" + (f"; {pick} loads but its kernels need one" if pick else "")
    major, minor = capability
    cc = f"compute capability {major}.{minor}"
    if major < 7:
        return None, f"{cc} is older than Volta (7.0); the native kernels need 7.0 or newer"
    if major == 7:
        if volta:
            return VOLTA_LIB, f"{cc}: the Volta/Turing library (sm_70/sm_75 code, CUDA 11.8)"
        return None, (f"{cc} needs {VOLTA_LIB}, which this install lacks (CUDA 13 cannot build sm_7x; build it "
                      "with a CUDA 11.8/12.x nvcc, see docs/kernels.md)")
    if modern:
        return MODERN_LIB, f"{cc}: the sm_80+ library"
    if volta:
        return VOLTA_LIB, (f"{cc}: no {MODERN_LIB} in this install, so the Volta library's compute_70 PTX, "
                           "compiled by the driver (slower kernels: no sm_80+ code paths)")
    return None, f"{cc}: neither {MODERN_LIB} nor {VOLTA_LIB} is installed"


def library_runs_on(file: str, archs: str, capability: tuple[int, int]) -> bool:
    """Whether a library built for ``archs`` (``revolta_build_archs()``, e.g. ``"70,75"``) has code for a GPU of
    ``capability``: SASS of the same major arch at or below its minor, or PTX (the Volta library's lowest arch,
    the modern one's highest) at or below it."""
    built = sorted(int(a.rstrip("af")) for a in archs.split(",") if a.strip().rstrip("af").isdigit())
    if not built:
        return False
    cc = capability[0] * 10 + capability[1]
    if any(a // 10 == capability[0] and a <= cc for a in built):
        return True
    ptx = built[0] if file.rsplit("/", 1)[-1] == VOLTA_LIB else built[-1]
    return ptx <= cc


def emulated_arch() -> int | None:
    """The arch ``REVOLTA_EMULATE_ARCH`` asks to behave as (70), or None when unset."""
    return envs.EMULATE_ARCH.get()


class NvmlError(RuntimeError):
    """NVML is missing, or could not list the GPUs."""


def nvml_capabilities() -> list[tuple[int, int]]:
    """(major, minor) of every GPU NVML sees, in NVML's order; raises NvmlError when NVML is unusable."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as exc:
        raise NvmlError(f"no NVML ({exc})") from None
    if nvml.nvmlInit_v2() != 0:
        raise NvmlError("nvmlInit failed (no driver or no GPU)")
    try:
        count = ctypes.c_uint(0)
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            raise NvmlError("nvmlDeviceGetCount failed")
        caps = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            major, minor = ctypes.c_int(0), ctypes.c_int(0)
            if nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != 0 or nvml.nvmlDeviceGetCudaComputeCapability(
                    handle, ctypes.byref(major), ctypes.byref(minor)) != 0:
                raise NvmlError(f"NVML could not read GPU {i}'s compute capability")
            caps.append((major.value, minor.value))
        return caps
    finally:
        nvml.nvmlShutdown()


def driver_versions() -> tuple[str, str] | None:
    """(driver version, the CUDA version it supports), e.g. ``("570.124.06", "12.8")``, from NVML; None without
    a driver."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        buf = ctypes.create_string_buffer(96)
        cuda = ctypes.c_int(0)
        if nvml.nvmlSystemGetDriverVersion(buf, 96) != 0 or nvml.nvmlSystemGetCudaDriverVersion_v2(
                ctypes.byref(cuda)) != 0:
            return None
        return buf.value.decode(), f"{cuda.value // 1000}.{cuda.value % 1000 // 10}"
    finally:
        nvml.nvmlShutdown()


def visible(caps: list[tuple[int, int]], visible_devices: str | None) -> list[tuple[int, int]]:
    """The entries of ``caps`` (NVML order) that ``CUDA_VISIBLE_DEVICES`` (None: unset) leaves visible; a list
    this cannot map (UUIDs, MIG names) keeps every GPU."""
    if visible_devices is None:
        return caps
    picked = []
    for item in visible_devices.split(","):
        item = item.strip()
        if not item.lstrip("-").isdigit():
            return caps if item else picked
        index = int(item)
        if index < 0 or index >= len(caps):
            break  # CUDA stops at the first invalid index
        picked.append(caps[index])
    return picked


def device_capability() -> tuple[tuple[int, int] | None, str]:
    """The lowest compute capability over the visible GPUs (None when there is none) and how it was found."""
    try:
        caps = visible(nvml_capabilities(), envs.CUDA_VISIBLE_DEVICES.raw()
                       if envs.CUDA_VISIBLE_DEVICES.is_set() else None)
    except NvmlError as exc:
        return None, str(exc)
    if not caps:
        return None, "NVML sees no visible GPU"
    return min(caps), f"NVML: {len(caps)} visible GPU(s), lowest compute capability {min(caps)[0]}.{min(caps)[1]}"


def effective_capability() -> tuple[tuple[int, int] | None, str]:
    """:func:`device_capability`, or (7, 0) in Volta mode (``REVOLTA_EMULATE_ARCH=70``), and why."""
    cap, how = device_capability()
    arch = emulated_arch()
    if arch is not None:
        return (arch // 10, arch % 10), f"REVOLTA_EMULATE_ARCH={arch} (the GPU: {how})"
    return cap, how


def effective_arch(capability: tuple[int, int] | None = None) -> int | None:
    """The arch host code should decide for, as ``major * 10 + minor`` (70 for a V100): ``REVOLTA_EMULATE_ARCH``
    when set, else ``capability`` when given, else the lowest visible GPU's; None when there is no GPU."""
    arch = emulated_arch()
    if arch is not None:
        return arch
    if capability is None:
        capability = device_capability()[0]
    return None if capability is None else capability[0] * 10 + capability[1]
