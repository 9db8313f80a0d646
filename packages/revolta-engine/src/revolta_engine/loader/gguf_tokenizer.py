"""The tokenizer a GGUF file describes, built by transformers' GGUF converter (same tokens as transformers)."""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from revolta_engine.errors import ModelLoadError


def load_gguf_tokenizer(path: Path) -> PreTrainedTokenizerBase:
    """Build the fast tokenizer (vocab, merges, special tokens, chat template) from GGUF ``path``.

    ``AutoTokenizer.from_pretrained(dir, gguf_file=...)`` first rebuilds the whole model config through
    transformers' slow legacy GGUF reader (~5 s for SmolLM2) only to pick the tokenizer class, which for these
    files is the generic ``TokenizersBackend``; calling that class directly builds the same tokenizer from
    the same converter in ~0.3 s.
    """
    try:
        return PreTrainedTokenizerFast.from_pretrained(
            str(path.parent), gguf_file=path.name, local_files_only=True
        )
    except Exception as exc:  # the converter raises ValueError/KeyError for unknown tokenizer types
        raise ModelLoadError(f"Cannot build the tokenizer of GGUF file {path}: {exc}") from exc
