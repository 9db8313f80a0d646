"""Opening the engine's checkpoint (``model``, loader options, ``hf_overrides``) and the options checked against it:
vLLM's ``quantization`` and ``trust_remote_code``, and the request sampling defaults from its generation config
(:mod:`revolta_engine.engine.generation_defaults`)."""

from __future__ import annotations

import logging
from typing import Any

from revolta_engine.config.args import EngineArgs
from revolta_engine.config.sources import ConfigResolver
from revolta_engine.engine.generation_defaults import log_sampling_defaults, sampling_defaults
from revolta_engine.errors import InvalidRequestError
from revolta_engine.layers.quant.config import parse_quant_config
from revolta_engine.loader import load_checkpoint
from revolta_engine.loader.checkpoint import Checkpoint

logger = logging.getLogger(__name__)

# vLLM's --quantization names -> the scheme of the checkpoint that serves them here (our own kernels run either way)
QUANTIZATION_NAMES = {"awq": "awq", "awq_marlin": "awq", "gptq": "gptq", "gptq_marlin": "gptq", "marlin": "gptq",
                      "gguf": "gguf"}


def model_path(args: EngineArgs) -> str:
    """The checkpoint ``args`` name: ``model``, or the embedded SmolLM2 when unset."""
    if args.model is None:
        from revolta_engine.loader import default_model

        return str(default_model())
    return args.model


def open_checkpoint(args: EngineArgs) -> Checkpoint:
    """Open the checkpoint ``args`` name with their loader options (weights are read later, when iterated)."""
    return load_checkpoint(model_path(args), tokenizer=args.tokenizer, load_format=args.load_format,
                           skip_tokenizer_init=args.skip_tokenizer_init, hf_overrides=args.hf_overrides)


def resolve_checkpoint_options(cfg: ConfigResolver, checkpoint: Checkpoint) -> dict[str, Any]:
    """Check ``quantization`` against the checkpoint, note ``trust_remote_code``, and return the sampling defaults
    requests get (``LLMEngine.default_sampling``). Raises ``InvalidRequestError`` at startup for a mismatch."""
    check_quantization(cfg.resolve("quantization"), checkpoint)
    if cfg.resolve("trust_remote_code"):
        logger.info("trust_remote_code changes nothing here: ReVolta runs its own implementation of each model "
                    "family and never imports code shipped with a checkpoint")
    source = cfg.resolve("generation_config")
    defaults = sampling_defaults(checkpoint.generation_config, source, cfg.resolve("override_generation_config"))
    log_sampling_defaults(defaults, source)
    return defaults


def check_quantization(requested: str | None, checkpoint: Checkpoint) -> None:
    """vLLM's ``quantization`` names a scheme; here the checkpoint's own ``quantization_config`` decides the
    kernels, so a name is only checked against it (ReVolta does not quantize a 16-bit checkpoint at load)."""
    if requested is None:
        return
    wanted = QUANTIZATION_NAMES.get(requested.lower())
    if wanted is None:
        raise InvalidRequestError(f"quantization {requested!r} is not supported; ReVolta runs AWQ (awq, awq_marlin), "
                                  "GPTQ (gptq, gptq_marlin) and GGUF checkpoints", param="quantization")
    if checkpoint.format == "gguf":
        actual = "gguf"
    else:
        qc = parse_quant_config(checkpoint.hf_config)
        actual = qc.method if qc is not None else "none"
    if actual != wanted:
        what = "not quantized" if actual == "none" else f"quantized with {actual}"
        raise InvalidRequestError(f"quantization {requested!r} needs a {wanted} checkpoint, but {checkpoint.path} is "
                                  f"{what} (ReVolta reads the scheme from the checkpoint and does not quantize at "
                                  "load; leave quantization unset)", param="quantization")
