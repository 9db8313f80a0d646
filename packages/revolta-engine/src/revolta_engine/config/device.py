"""The device and the compute dtype: what ``auto`` means on this machine, and what it cannot run."""

from __future__ import annotations

import torch

from revolta_engine.errors import InvalidRequestError
from revolta_kernels import effective_arch

_DTYPES = {
    "float32": torch.float32, "float": torch.float32, "fp32": torch.float32,
    "float16": torch.float16, "half": torch.float16, "fp16": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
}


def parse_dtype(name: str) -> torch.dtype:
    """Map a dtype name to a torch dtype, with a clear error for unknown names."""
    try:
        return _DTYPES[name]
    except KeyError:
        raise InvalidRequestError(
            f"unknown dtype {name!r}; choose one of auto, {', '.join(sorted(_DTYPES))}", param="dtype"
        ) from None


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when a GPU is visible, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InvalidRequestError("device 'cuda' was requested but no CUDA GPU is visible", param="device")
    return device


def choose_dtype(requested: str, checkpoint_dtype: torch.dtype | None, device: torch.device) -> tuple[torch.dtype, str]:
    """Pick the compute dtype: explicit wins; ``auto`` is float32 on CPU, fp16 on Volta/Turing (and in Volta mode,
    ``REVOLTA_EMULATE_ARCH``), else the checkpoint's."""
    if requested != "auto":
        return parse_dtype(requested), "user"
    if device.type == "cpu":
        return torch.float32, "profile"
    if _arch(device) < 80:
        return torch.float16, "profile"
    if checkpoint_dtype in (torch.float16, torch.bfloat16):
        return checkpoint_dtype, "profile"
    return torch.float16, "profile"


def check_dtype_on_device(dtype: torch.dtype, device: torch.device) -> None:
    """Refuse bfloat16 on GPUs without bfloat16 math (before compute capability 8.0, or in Volta mode)."""
    if device.type == "cuda" and dtype == torch.bfloat16 and _arch(device) < 80:
        raise InvalidRequestError("bfloat16 needs compute capability 8.0 or newer (REVOLTA_EMULATE_ARCH makes "
                                  "the GPU count as Volta); use --dtype float16", param="dtype")


def _arch(device: torch.device) -> int:
    """The arch the engine decides for on ``device`` (70 in Volta mode, whatever the GPU)."""
    arch = effective_arch(torch.cuda.get_device_capability(device))
    assert arch is not None
    return arch


def native_kernels_note(device: torch.device, available: bool, status: str) -> str | None:
    """The warning an engine on ``device`` gives at startup when the native kernels are not loaded (``status`` is
    ``revolta_kernels.native_status()``): on a GPU every op then runs its torch reference, many times slower. None
    on the CPU, where the reference is the path, or when the kernels are in use."""
    if device.type != "cuda" or available:
        return None
    return (f"the native CUDA kernels are not in use ({status}); every op runs its torch reference on {device}, "
            "which is many times slower")
