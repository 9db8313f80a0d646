"""A tiny random Llama checkpoint with a real (small, trained) byte-level BPE tokenizer and a ChatML template.

Fast to load and to run, for tests that need many requests (fuzzing, shutdown, CLI commands); the real
SmolLM2 serves the tests that check answers.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] "
          "+ '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
_CORPUS = ["The quick brown fox jumps over the lazy dog.", "Hello world! How are you today?",
           "Servers stream tokens to their clients.", "Numbers 0123456789 and symbols {}[]:,\"."] * 4


def make_tiny_llama(root: Path) -> Path:
    """Write the checkpoint under ``root`` and return its directory."""
    root.mkdir(parents=True, exist_ok=True)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(_CORPUS, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|endoftext|>",
                                        eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=CHATML)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=0, eos_token_id=2, pad_token_id=None, initializer_range=0.2)
    torch.manual_seed(0)
    LlamaForCausalLM(config).eval().save_pretrained(root)
    tokenizer.save_pretrained(root)
    return root
