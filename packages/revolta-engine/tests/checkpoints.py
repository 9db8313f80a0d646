"""Tiny random HF checkpoints (Llama, Qwen2, Qwen3) built offline with transformers, for tests.

``make_tiny_checkpoint(tmp_path, "llama")`` writes a directory that transformers and ReVolta both load:
config.json, generation_config.json, the weights (one safetensors file, or shards with a
``model.safetensors.index.json``, optionally inside a subfolder) and a small real byte-level BPE tokenizer
trained on a few sentences, with a ChatML chat template, bos/eos/pad set. Nothing is downloaded.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    PretrainedConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
)

ARCHS = ("llama", "qwen2", "qwen3")

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_CORPUS = (
    "The quick brown fox jumps over the lazy dog.",
    "ReVolta serves large language models on Volta GPUs and on the CPU.",
    "Hello world! How are you today? I am fine, thank you.",
    "Paged attention stores keys and values in fixed-size blocks.",
    "Prefix caching reuses blocks whose tokens hash to the same value.",
    "Numbers like 12345 and 3.14159 are split into digits; symbols like @#$% are bytes.",
    "Emoji and accents: café, naïve, Zürich, 東京, 🚀.",
    "def main():\n    print('hello')\n    return 0\n",
)


@lru_cache(maxsize=1)
def _trained_tokenizer_json() -> str:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(_CORPUS) * 4, trainer)
    return tok.to_str()


def make_tokenizer(*, add_bos: bool) -> PreTrainedTokenizerFast:
    """A small byte-level BPE tokenizer (any text encodes) with ChatML specials and chat template.

    bos is ``<|endoftext|>`` (prepended to every encoding when ``add_bos``), eos ``<|im_end|>``, pad
    ``<|endoftext|>``.
    """
    backend = Tokenizer.from_str(_trained_tokenizer_json())
    if add_bos:
        backend.post_processor = processors.TemplateProcessing(
            single="<|endoftext|> $A",
            pair="<|endoftext|> $A <|endoftext|> $B",
            special_tokens=[("<|endoftext|>", 0)],
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
    )


def make_tiny_config(
    arch: str, vocab_size: int, *, tie_word_embeddings: bool = False, **overrides: Any
) -> PretrainedConfig:
    """A 2-layer config of ``arch`` with GQA (4 query heads, 2 kv heads, head_dim 16)."""
    common: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        bos_token_id=0,
        eos_token_id=2,
        # No pad id: transformers zeroes the padding_idx embedding row, and bos (id 0) would embed to zeros.
        pad_token_id=None,
        tie_word_embeddings=tie_word_embeddings,
        # Wider than transformers' 0.02 so random logits are spread out: greedy parity then rarely meets ties.
        initializer_range=0.2,
    )
    if arch == "llama":
        config: PretrainedConfig = LlamaConfig(**common)
    elif arch == "qwen2":
        config = Qwen2Config(**common)
    elif arch == "qwen3":
        config = Qwen3Config(head_dim=16, **common)
    else:
        raise ValueError(f"arch must be one of {ARCHS}, not {arch!r}")
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def make_tiny_checkpoint(
    tmp_path: Path,
    arch: str,
    *,
    shards: int = 1,
    subfolder: str | None = None,
    tie_word_embeddings: bool = False,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    with_tokenizer: bool = True,
    name: str | None = None,
    vocab_size: int | None = None,
    **config_overrides: Any,
) -> Path:
    """Write a tiny random ``arch`` checkpoint under ``tmp_path`` and return its directory.

    ``shards == 1`` without ``subfolder``: transformers' own ``save_pretrained`` (one model.safetensors).
    Otherwise the tensors are split into ``shards`` files named like transformers names them, placed in
    ``subfolder`` when given, and listed in ``model.safetensors.index.json`` with their relative paths.
    ``config_overrides`` are set on the config (e.g. ``rope_scaling``). ``vocab_size`` (default: the
    tokenizer's) may exceed the tokenizer, as padded embeddings do.
    """
    root = Path(tmp_path) / (
        name
        or f"tiny-{arch}-s{shards}{'-' + subfolder if subfolder else ''}"
        f"{'-tied' if tie_word_embeddings else ''}-{seed}"
    )
    root.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(add_bos=arch == "llama")
    config = make_tiny_config(
        arch, vocab_size or len(tokenizer), tie_word_embeddings=tie_word_embeddings, **config_overrides
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).to(dtype).eval()
    if shards == 1 and subfolder is None:
        model.save_pretrained(root)
    else:
        config.dtype = dtype
        config.save_pretrained(root)
        model.generation_config.save_pretrained(root)
        _save_shards(model, root, shards, subfolder)
    if with_tokenizer:
        tokenizer.save_pretrained(root)
    return root


def _save_shards(model: torch.nn.Module, root: Path, shards: int, subfolder: str | None) -> None:
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # shares storage with the embedding; saved checkpoints drop it
    names = list(state)
    if not 1 <= shards <= len(names):
        raise ValueError(f"shards must be in 1..{len(names)}")
    folder = root / subfolder if subfolder else root
    folder.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    per_shard = -(-len(names) // shards)
    for i in range(shards):
        part = names[i * per_shard : (i + 1) * per_shard]
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: state[n] for n in part}, str(folder / file), metadata={"format": "pt"})
        rel = f"{subfolder}/{file}" if subfolder else file
        weight_map.update({n: rel for n in part})
    total = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (root / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
