"""Builds a model on its device and dtype and fills its weights (or random ones for benchmarks)."""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig

from revolta_engine.layers.cpu_layout import use_cpu_decode_layout
from revolta_engine.models.registry import resolve_model_class
from revolta_engine.models.weights import finish_quantized_layers

logger = logging.getLogger(__name__)


@contextmanager
def default_dtype(dtype: torch.dtype):
    """Make ``dtype`` torch's default floating dtype inside the block."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build_model(config: PretrainedConfig, max_position: int, dtype: torch.dtype, device: torch.device) -> nn.Module:
    """Instantiate the model class for ``config`` directly on ``device`` in ``dtype`` (weights undefined)."""
    cls = resolve_model_class(config)
    with default_dtype(dtype), torch.device(device):
        model = cls(config, max_position)
    return model.eval()


def fill_dummy_weights(model: nn.Module, seed: int) -> None:
    """Random weights (normal, std 0.02; norms at 1) so speed can be measured without a checkpoint.

    Quantized layers get random packed integers and zero points, and scales in [1e-3, 3e-3], so that
    (q - z) * scale has about the dense weights' spread and activations stay finite through the layers;
    GPTQ's ``g_idx`` groups the input channels in order, or in a random order for act-order (desc_act)
    configs, which are then repacked as a loaded checkpoint is.
    """
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    for name, param in model.named_parameters():
        if name.endswith(".g_idx"):
            module: Any = model.get_submodule(name.rpartition(".")[0])
            module.quant.fill_dummy_g_idx(module, gen)
        elif name.endswith("norm.weight"):
            param.data.fill_(1.0)
        elif not param.dtype.is_floating_point:  # packed quantized weights and zero points: random bits
            param.data.copy_(torch.randint(-(2**31), 2**31 - 1, param.shape, dtype=torch.int32, generator=gen,
                                           device=device))
        elif name.endswith(".scales"):
            param.data.uniform_(1e-3, 3e-3, generator=gen)
        else:
            param.data.normal_(0.0, 0.02, generator=gen)
    finish_quantized_layers(model)


def load_model(config: PretrainedConfig, weights, max_position: int, dtype: torch.dtype,
               device: torch.device, seed: int) -> Any:
    """Build the model and load ``weights`` (an iterable of HF-named tensors), or dummy ones if None."""
    start = time.perf_counter()
    model = build_model(config, max_position, dtype, device)
    if weights is None:
        fill_dummy_weights(model, seed)
    else:
        model.load_weights(weights)  # type: ignore[operator]
    if device.type == "cpu":
        restored = use_cpu_decode_layout(model)
        logger.debug("%d weight matrices stored input-major for CPU decode", restored)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("Loaded %s (%.1fM parameters, %s) on %s in %.1f s", type(model).__name__, n_params / 1e6,
                str(dtype).removeprefix("torch."), device, time.perf_counter() - start)
    return model
