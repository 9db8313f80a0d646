"""vLLM's ``hf_overrides``: values set on the checkpoint's config before the model is built, e.g. YaRN rope
scaling to serve a Qwen3 model past its 32K trained positions (``{"rope_scaling": {"rope_type": "yarn",
"factor": 4.0, "original_max_position_embeddings": 32768}}``, Qwen's recipe)."""

from __future__ import annotations

import logging
from typing import Any

from transformers import PretrainedConfig

from revolta_engine.errors import InvalidRequestError

logger = logging.getLogger(__name__)

# transformers 5 keeps rope settings in ``rope_parameters`` (rope_theta included); older configs and vLLM command
# lines say ``rope_scaling``, with ``type`` for ``rope_type``
_ROPE_KEYS = ("rope_scaling", "rope_parameters")


def apply_hf_overrides(config: PretrainedConfig, overrides: dict[str, Any] | None, where: str = "") -> None:
    """Set ``overrides`` on ``config``: a dict given for a sub-config (``text_config``) is applied inside it, and
    rope settings are merged into the config's own (so its ``rope_theta`` stays)."""
    if not overrides:
        return
    if not isinstance(overrides, dict):
        raise InvalidRequestError("hf_overrides must be a JSON object of config keys", param="hf_overrides")
    for key, value in overrides.items():
        name = f"{where}{key}"
        current = getattr(config, key, None)
        if isinstance(value, dict) and isinstance(current, PretrainedConfig):
            apply_hf_overrides(current, value, f"{name}.")
        elif key in _ROPE_KEYS:
            _merge_rope(config, value, name)
        else:
            setattr(config, key, value)
        logger.info("Config override: %s = %r", name, value)


def _merge_rope(config: PretrainedConfig, value: Any, name: str) -> None:
    if not isinstance(value, dict):
        raise InvalidRequestError(f"hf_overrides {name} must be a JSON object", param="hf_overrides")
    merged = dict(getattr(config, "rope_parameters", None) or {})
    theta = merged.get("rope_theta", getattr(config, "rope_theta", None))
    merged.update(value)
    if "type" in merged and "rope_type" not in value:
        merged["rope_type"] = merged.pop("type")
    merged.pop("type", None)
    if theta is not None and merged.get("rope_theta") is None:
        merged["rope_theta"] = theta
    config.rope_parameters = merged
