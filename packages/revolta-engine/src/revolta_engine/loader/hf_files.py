"""Read the non-weight parts of an HF checkpoint directory: config, tokenizer, chat template, generation config."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from transformers import AutoConfig, AutoTokenizer, PretrainedConfig, PreTrainedTokenizerBase
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from revolta_engine.errors import ModelLoadError, UnsupportedModelError

logger = logging.getLogger(__name__)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "tekken.json")
# Older AutoGPTQ / AutoAWQ checkpoints keep their quantization settings beside config.json instead of in it.
QUANT_CONFIG_FILES = ("quantize_config.json", "quant_config.json")


def load_hf_config(root: Path, *, trust_remote_code: bool) -> PretrainedConfig:
    """Load ``root/config.json`` with transformers; make sure ``architectures`` is set."""
    if not (root / "config.json").is_file():
        raise ModelLoadError(f"{root} is not a model directory: it has no config.json.")
    try:
        config = AutoConfig.from_pretrained(
            str(root), trust_remote_code=trust_remote_code, local_files_only=True
        )
    except ValueError as exc:
        model_type = _raw_json(root / "config.json").get("model_type")
        raise UnsupportedModelError(
            f"Cannot build a config for {root} (model_type={model_type!r}): {exc}"
        ) from exc
    except OSError as exc:
        raise ModelLoadError(f"Cannot read {root / 'config.json'}: {exc}") from exc
    set_architectures(config)
    attach_quant_config_file(root, config)
    return config


def attach_quant_config_file(root: Path, config: PretrainedConfig) -> None:
    """Give ``config`` the quantization settings of a ``quantize_config.json`` (AutoGPTQ) or ``quant_config.json``
    (AutoAWQ) beside it when config.json has none, as vLLM reads them; one without ``quant_method`` is GPTQ's
    unless it has AutoAWQ's keys (``w_bit``, ``q_group_size``, ``zero_point``, ``version``)."""
    if getattr(config, "quantization_config", None):
        return
    for name in QUANT_CONFIG_FILES:
        settings = _raw_json(root / name)
        if not settings:
            continue
        if "quant_method" not in settings:
            autoawq = any(key in settings for key in ("w_bit", "q_group_size", "zero_point", "version"))
            settings = {**settings, "quant_method": "awq" if autoawq else "gptq"}
        config.quantization_config = settings
        logger.info("Quantization settings read from %s (%s)", root / name, settings["quant_method"])
        return


def set_architectures(config: PretrainedConfig) -> None:
    """Fill ``config.architectures`` from the model type when the checkpoint does not say (GGUF, old configs)."""
    if not getattr(config, "architectures", None):
        arch = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(config.model_type)
        if arch is None:
            raise UnsupportedModelError(f"Model type {config.model_type!r} has no causal-LM architecture.")
        config.architectures = [arch]


def has_tokenizer_files(root: Path) -> bool:
    """Whether directory ``root`` ships tokenizer files."""
    return any((root / name).is_file() for name in TOKENIZER_FILES)


def load_hf_tokenizer(source: Path, *, trust_remote_code: bool) -> PreTrainedTokenizerBase:
    """Load the tokenizer in directory ``source`` with transformers (local files only)."""
    try:
        return AutoTokenizer.from_pretrained(
            str(source), trust_remote_code=trust_remote_code, local_files_only=True
        )
    except Exception as exc:  # transformers raises many types here (OSError, ValueError, KeyError...)
        raise ModelLoadError(f"Cannot load the tokenizer from {source}: {exc}") from exc


def read_chat_template(root: Path) -> str | None:
    """The chat template shipped in ``root`` (chat_template.jinja, chat_template.json or tokenizer_config.json)."""
    jinja = root / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    for name in ("chat_template.json", "tokenizer_config.json"):
        template = _raw_json(root / name).get("chat_template")
        if isinstance(template, list):  # named templates: [{"name": "default", "template": "..."}]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        if isinstance(template, str):
            return template
    return None


def read_generation_config(root: Path) -> dict[str, Any]:
    """The contents of ``root/generation_config.json``, or ``{}``."""
    return _raw_json(root / "generation_config.json")


def eos_ids(*sources: Any) -> set[int]:
    """Union of eos ids given as ints, lists of ints or None."""
    ids: set[int] = set()
    for value in sources:
        if isinstance(value, int) and not isinstance(value, bool):
            ids.add(value)
        elif isinstance(value, (list, tuple, set)):
            ids.update(v for v in value if isinstance(v, int) and not isinstance(v, bool))
    return ids


def _raw_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"Cannot parse {path}: {exc}") from exc
    return data if isinstance(data, dict) else {}
