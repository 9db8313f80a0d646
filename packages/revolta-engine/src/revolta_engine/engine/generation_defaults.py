"""The sampling defaults a model's makers recommend, as vLLM's ``--generation-config`` and
``--override-generation-config`` take them.

A checkpoint's ``generation_config.json`` often names the sampling its model was tuned for (Qwen3: temperature
0.6, top_p 0.95, top_k 20). With ``generation_config="auto"`` (the default, as in vLLM) those values are the
defaults of every request that does not set them itself; ``"vllm"`` ignores the file; a directory (or file)
path reads that one instead. ``max_new_tokens`` becomes a limit on every request's output length.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from revolta_engine.errors import InvalidRequestError
from revolta_engine.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

# generation_config.json key -> SamplingParams field (the keys vLLM takes from it)
GENERATION_KEYS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                   "repetition_penalty": "repetition_penalty", "max_new_tokens": "max_tokens"}


def sampling_defaults(checkpoint_config: dict[str, Any], source: str = "auto",
                      override: dict[str, Any] | None = None) -> dict[str, Any]:
    """The SamplingParams field values (``temperature``, ``top_p``, ``top_k``, ``min_p``, ``repetition_penalty``,
    ``max_tokens``) that requests default to.

    ``checkpoint_config`` is the checkpoint's ``generation_config.json`` (``{}`` without one); ``source`` is
    ``"auto"`` (use it), ``"vllm"`` (ignore it) or a path; ``override`` is merged on top. Raises
    ``InvalidRequestError`` for an unreadable path, an override key that is not a sampling setting, or a value
    ``SamplingParams`` refuses, so a bad setting stops the engine at startup.
    """
    if source == "auto":
        config = dict(checkpoint_config)
    elif source == "vllm":
        config = {}
    else:
        config = _read_config(Path(source))
    if override:
        unknown = sorted(set(override) - set(GENERATION_KEYS))
        if unknown:
            raise InvalidRequestError(f"override_generation_config has unknown key(s) {', '.join(unknown)}; the "
                                      f"sampling settings are {', '.join(GENERATION_KEYS)}",
                                      param="override_generation_config")
        config.update(override)
    defaults = {field: config[key] for key, field in GENERATION_KEYS.items() if config.get(key) is not None}
    try:
        SamplingParams(**defaults).validate()
    except (InvalidRequestError, TypeError) as e:
        raise InvalidRequestError(f"the generation config's sampling defaults are not valid: {e}",
                                  param="generation_config") from None
    return defaults


def apply_sampling_defaults(given: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """SamplingParams values: those ``given`` (None: unset), and ``defaults`` (:func:`sampling_defaults`) for the
    rest; a default ``max_tokens`` (the model's ``max_new_tokens``) also limits a given one, as in vLLM."""
    values = dict(defaults)
    for name, value in given.items():
        if value is not None:
            values[name] = min(value, values[name]) if name == "max_tokens" and name in values else value
    return values


def log_sampling_defaults(defaults: dict[str, Any], source: str) -> None:
    """Tell the user which defaults requests get (they change what a request without its own values samples)."""
    if not defaults:
        return
    shown = ", ".join(f"{k}={v}" for k, v in defaults.items())
    origin = "the model's generation config" if source == "auto" else f"generation config {source!r}"
    logger.info("Requests that do not set them sample with %s from %s (override with --generation-config vllm "
                "or --override-generation-config)", shown, origin)


def _read_config(path: Path) -> dict[str, Any]:
    file = path / "generation_config.json" if path.is_dir() else path
    try:
        config = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InvalidRequestError(f"cannot read the generation config {file}: {e} (generation_config takes "
                                  "'auto', 'vllm' or a directory holding generation_config.json)",
                                  param="generation_config") from None
    if not isinstance(config, dict):
        raise InvalidRequestError(f"the generation config {file} is not a JSON object", param="generation_config")
    return config
