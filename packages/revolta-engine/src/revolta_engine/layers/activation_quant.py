"""The engine's ``activation_quant`` option: int8 activations in the native quantized decode kernels.

With ``int8`` the skinny int4 / int8-weight GEMVs (at most 8 rows, i.e. decode) round each step's activations to
int8 (one symmetric scale per 64 channels, 32 with int8 weights) and multiply with dp4a: faster, but no longer
bit-equal to the fp16 path. The setting is process-wide in the native library and read when a kernel is launched
(CUDA graphs capture it), so the engine applies it before its model runs anything.
"""

from __future__ import annotations

import logging

import torch

import revolta_kernels
from revolta_engine.errors import InvalidRequestError

logger = logging.getLogger(__name__)

ACTIVATION_QUANT_CHOICES = ("none", "int8")


def check_activation_quant(mode: str) -> str:
    """``mode`` if it is a known choice; InvalidRequestError (param ``activation_quant``) otherwise."""
    if mode not in ACTIVATION_QUANT_CHOICES:
        raise InvalidRequestError(
            f"unknown activation_quant {mode!r}; choose one of {', '.join(ACTIVATION_QUANT_CHOICES)}",
            param="activation_quant")
    return mode


def apply_activation_quant(mode: str, device: torch.device) -> None:
    """Set the native quantized decode kernels' activation precision for ``mode`` (``none`` or ``int8``).

    On a CUDA device with the native kernels the setting is made either way, so ``none`` also clears an ``int8``
    an earlier engine in this process left. Elsewhere ``int8`` has nothing to act on: a warning, and the engine
    continues with fp16 (or the CPU's float32) activations.
    """
    check_activation_quant(mode)
    if device.type != "cuda" or not revolta_kernels.native_available():
        if mode == "int8":
            logger.warning("activation_quant=int8 only affects the native CUDA quantized-weight kernels, which are "
                           "not in use on %s; the reference path keeps its fp16/fp32 activations (no int8 rounding)",
                           device)
        return
    from revolta_kernels import native_quant

    native_quant.set_int8_activations(mode == "int8")
    if mode == "int8":
        logger.info("activation_quant=int8: quantized decode projections (at most 8 rows) round their activations to "
                    "int8 and multiply with dp4a; faster, but not bit-equal to fp16 activations")
