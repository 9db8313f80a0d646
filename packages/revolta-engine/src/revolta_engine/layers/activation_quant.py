"""The engine's ``activation_quant`` option: int8 activations in the quantized decode projections.

With ``int8`` the model's quantized (AWQ / GPTQ) linear layers pass ``int8_activations=True`` to their ops: calls
of at most 8 rows (decode) round the activations to int8 (one symmetric scale per 64 channels, 32 with 8-bit
weights) and the CUDA kernels multiply with dp4a; faster, but no longer bit-equal to fp16 activations. The
references round the same way, so the option means the same on every device. It is an attribute of each layer,
set when the model is built, so engines with different settings can share a process.
"""

from __future__ import annotations

import logging

from torch import nn

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


def set_activation_quant(model: nn.Module, mode: str) -> int:
    """Give every quantized linear layer of ``model`` the activation precision of ``mode`` (``none`` or ``int8``);
    returns how many layers that is (dense layers have no such setting)."""
    check_activation_quant(mode)
    layers = [m for m in model.modules() if hasattr(m, "int8_activations")]
    for layer in layers:
        setattr(layer, "int8_activations", mode == "int8")  # noqa: B010 (nn.Module's __setattr__ typing)
    if mode == "int8":
        logger.info("activation_quant=int8: %d quantized projections round their decode activations (at most 8 rows) "
                    "to int8; faster on CUDA, not bit-equal to fp16 activations", len(layers))
    return len(layers)
