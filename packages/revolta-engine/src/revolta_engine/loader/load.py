"""``load_checkpoint``: open a model path (HF safetensors directory or GGUF file) into a :class:`Checkpoint`."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from revolta_engine.errors import ModelLoadError

from .checkpoint import Checkpoint, WeightSource
from .dummy_weights import DummyWeights
from .gguf_tokenizer import load_gguf_tokenizer
from .gguf_weights import EXTRA_EOG_KEYS, GgufWeights, gguf_config, gguf_scalar, open_gguf
from .hf_files import (
    eos_ids,
    has_tokenizer_files,
    load_hf_config,
    load_hf_tokenizer,
    read_chat_template,
    read_generation_config,
)
from .hf_overrides import apply_hf_overrides
from .safetensors_weights import find_safetensors

logger = logging.getLogger(__name__)

LOAD_FORMATS = ("auto", "safetensors", "gguf", "dummy")


def load_checkpoint(
    model: str | os.PathLike[str],
    *,
    tokenizer: str | os.PathLike[str] | None = None,
    skip_tokenizer_init: bool = False,
    trust_remote_code: bool = False,
    load_format: str = "auto",
    hf_overrides: dict[str, Any] | None = None,
) -> Checkpoint:
    """Open ``model`` (a checkpoint directory, a ``.gguf`` file, or a directory holding one ``.gguf``).

    Validates the layout up front (config, weight files, index shards) and raises ModelLoadError naming the
    problem; weights are read later by ``Checkpoint.iter_weights()``. ``tokenizer`` overrides where the
    tokenizer comes from (a directory or a ``.gguf`` file). ``load_format="dummy"`` needs only config.json
    and yields random weights with the right names and shapes. Nothing is downloaded. ``hf_overrides`` (vLLM's) are
    set on the config before anything reads it (see :func:`apply_hf_overrides`).
    """
    if load_format not in LOAD_FORMATS:
        raise ModelLoadError(f"Unknown load_format {load_format!r}; expected one of {LOAD_FORMATS}.")
    path = Path(os.fspath(model)).expanduser()
    if not path.exists():
        raise ModelLoadError(
            f"Model path {str(model)!r} does not exist. Pass a local checkpoint directory or a .gguf file "
            "(ReVolta does not download models)."
        )
    start = time.perf_counter()
    gguf_file = _gguf_target(path, load_format)
    if gguf_file is not None:
        checkpoint = _load_gguf(gguf_file, tokenizer, skip_tokenizer_init, trust_remote_code, hf_overrides)
    elif path.is_dir():
        checkpoint = _load_hf_dir(path, tokenizer, skip_tokenizer_init, trust_remote_code, load_format, hf_overrides)
    else:
        raise ModelLoadError(
            f"Model path {path} is a file but not a .gguf file; pass a checkpoint directory."
        )
    logger.info(
        "Opened %s checkpoint %s (%s) in %.1f s",
        checkpoint.format,
        checkpoint.path,
        ", ".join(checkpoint.hf_config.architectures or []),
        time.perf_counter() - start,
    )
    return checkpoint


def _gguf_target(path: Path, load_format: str) -> Path | None:
    if path.is_file():
        return path if path.suffix == ".gguf" or load_format == "gguf" else None
    if (path / "config.json").is_file() and load_format != "gguf":
        return None
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return ggufs[0]
    if len(ggufs) > 1:
        raise ModelLoadError(
            f"{path} holds several GGUF files {[g.name for g in ggufs]}; pass one file's path."
        )
    if load_format == "gguf":
        raise ModelLoadError(f"load_format='gguf' but {path} holds no .gguf file.")
    return None


def _load_hf_dir(
    root: Path,
    tokenizer: str | os.PathLike[str] | None,
    skip_tokenizer_init: bool,
    trust_remote_code: bool,
    load_format: str,
    hf_overrides: dict[str, Any] | None,
) -> Checkpoint:
    config = load_hf_config(root, trust_remote_code=trust_remote_code)
    apply_hf_overrides(config, hf_overrides)
    weights: WeightSource
    if load_format == "dummy":
        weights = DummyWeights(config)
    else:
        weights = find_safetensors(root)
    tok_dir = Path(os.fspath(tokenizer)).expanduser() if tokenizer is not None else root
    tok = None
    if skip_tokenizer_init:
        logger.info("Tokenizer not loaded (skip_tokenizer_init): prompts must be token ids.")
    elif tok_dir.is_file() and tok_dir.suffix == ".gguf":
        tok = load_gguf_tokenizer(tok_dir)
    elif not tok_dir.exists():
        raise ModelLoadError(f"Tokenizer path {str(tokenizer)!r} does not exist.")
    elif has_tokenizer_files(tok_dir):
        tok = load_hf_tokenizer(tok_dir, trust_remote_code=trust_remote_code)
    else:
        logger.warning("%s ships no tokenizer; prompts must be token ids.", tok_dir)
    chat_template = getattr(tok, "chat_template", None) or read_chat_template(
        tok_dir if tok_dir.is_dir() else root
    )
    generation_config = read_generation_config(root)
    eos = eos_ids(
        getattr(config, "eos_token_id", None),
        generation_config.get("eos_token_id"),
        getattr(tok, "eos_token_id", None),
    )
    fmt = "dummy" if load_format == "dummy" else "safetensors"
    return Checkpoint(root, fmt, config, tok, chat_template, generation_config, eos, weights)


def _load_gguf(
    path: Path, tokenizer: str | os.PathLike[str] | None, skip_tokenizer_init: bool, trust_remote_code: bool,
    hf_overrides: dict[str, Any] | None,
) -> Checkpoint:
    reader = open_gguf(path)
    config = gguf_config(reader, path)
    apply_hf_overrides(config, hf_overrides)
    weights = GgufWeights(reader, config, path)
    tok = None
    if skip_tokenizer_init:
        logger.info("Tokenizer not loaded (skip_tokenizer_init): prompts must be token ids.")
    elif tokenizer is not None:
        tok_path = Path(os.fspath(tokenizer)).expanduser()
        if tok_path.is_file() and tok_path.suffix == ".gguf":
            tok = load_gguf_tokenizer(tok_path)
        elif tok_path.is_dir():
            tok = load_hf_tokenizer(tok_path, trust_remote_code=trust_remote_code)
        else:
            raise ModelLoadError(f"Tokenizer path {str(tokenizer)!r} does not exist.")
    elif reader.vocab_size is not None:
        tok = load_gguf_tokenizer(path)
    else:
        logger.warning("GGUF file %s carries no tokenizer; prompts must be token ids.", path)
    chat_template = getattr(tok, "chat_template", None) or gguf_scalar(reader, "tokenizer.chat_template")
    generation_config = {
        key: value
        for key in ("bos_token_id", "eos_token_id", "pad_token_id")
        if (value := getattr(config, key, None)) is not None
    }
    extra_eog = [gguf_scalar(reader, key) for key in EXTRA_EOG_KEYS]
    eos = eos_ids(config.eos_token_id, getattr(tok, "eos_token_id", None), extra_eog)
    return Checkpoint(path, "gguf", config, tok, chat_template, generation_config, eos, weights)
