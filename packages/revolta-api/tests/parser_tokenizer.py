"""A small real byte-level BPE tokenizer with Qwen3's tags as single tokens, and a streaming detokenizer.

Recorded model outputs are tokenized with it and replayed delta by delta, the way the engine streams them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] "
          "+ '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
TAGS = ["<think>", "</think>", "<tool_call>", "</tool_call>"]
_CORPUS = ["The capital of France is Paris. Let me think about the weather in Paris today.",
           '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}',
           "<function=get_weather> <parameter=city> Paris </parameter> </function> numbers 0123456789"] * 4


def make_tokenizer() -> PreTrainedTokenizerFast:
    """Tags are added tokens (not special), as in Qwen3's vocabulary."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(_CORPUS, trainers.BpeTrainer(
        vocab_size=500, special_tokens=["<|endoftext|>", "<|python_tag|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAGS])
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>")


def make_thinking_model(root: Path) -> Path:
    """A tiny random Llama over this tokenizer with a ChatML template, saved under ``root`` (its directory)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = make_tokenizer()
    tokenizer.chat_template = CHATML
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=0, eos_token_id=0, pad_token_id=None, initializer_range=0.2)
    torch.manual_seed(0)
    LlamaForCausalLM(config).eval().save_pretrained(root)
    tokenizer.save_pretrained(root)
    return root


def deltas(tokenizer: PreTrainedTokenizerFast, ids: list[int], step: int) -> Iterator[tuple[str, list[int]]]:
    """(text, token ids) deltas of ``step`` tokens each, text as incremental detokenization gives it."""
    shown = ""
    for i in range(0, len(ids), step):
        text = tokenizer.decode(ids[:i + step])
        if text.endswith("\ufffd"):  # an incomplete UTF-8 character waits for its next token
            yield "", ids[i:i + step]
            continue
        yield text[len(shown):], ids[i:i + step]
        shown = text


def encode(tokenizer: PreTrainedTokenizerFast, *parts: str) -> list[int]:
    """Token ids of the parts encoded one after another (a tag written as text stays several tokens)."""
    return [t for part in parts for t in tokenizer.encode(part, add_special_tokens=False)]
