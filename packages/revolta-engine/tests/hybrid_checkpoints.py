"""Tiny random checkpoints of the MoE and hybrid families (Qwen3-MoE, Qwen3-Next, Qwen3.5, Qwen3.5-MoE).

Built offline with transformers' own model classes and ``save_pretrained``, with the small BPE tokenizer of
:mod:`checkpoints`. Hybrids get 4 layers, three Gated DeltaNet and one full attention (``layer_types``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from checkpoints import make_tokenizer
from transformers import AutoModelForCausalLM, PretrainedConfig

FAMILIES = ("qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe")
HYBRID_LAYERS = ["linear_attention", "full_attention", "linear_attention", "linear_attention"]


def make_family_config(family: str, vocab_size: int, **overrides: Any) -> PretrainedConfig:
    """A tiny config of ``family``: hidden 64, GQA attention (4 heads, 2 KV heads, head_dim 16)."""
    common: dict[str, Any] = dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=2,
        pad_token_id=None, tie_word_embeddings=False, initializer_range=0.2,
    )
    moe = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)
    gdn = dict(layer_types=HYBRID_LAYERS, num_hidden_layers=4, linear_conv_kernel_dim=4, linear_key_head_dim=16,
               linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4)
    if family == "qwen3_moe":
        from transformers import Qwen3MoeConfig

        config: PretrainedConfig = Qwen3MoeConfig(num_hidden_layers=3, decoder_sparse_step=1, mlp_only_layers=[1],
                                                  norm_topk_prob=True, **moe, **common)
    elif family == "qwen3_next":
        from transformers import Qwen3NextConfig

        config = Qwen3NextConfig(**gdn, **moe, shared_expert_intermediate_size=48, norm_topk_prob=True,
                                 mlp_only_layers=[2], **common)
    elif family == "qwen3_5":
        from transformers import Qwen3_5TextConfig

        config = Qwen3_5TextConfig(**gdn, **common)
        config.architectures = ["Qwen3_5ForCausalLM"]
    elif family == "qwen3_5_moe":
        from transformers import Qwen3_5MoeTextConfig

        config = Qwen3_5MoeTextConfig(**gdn, **moe, shared_expert_intermediate_size=48, **common)
        config.architectures = ["Qwen3_5MoeForCausalLM"]
    else:
        raise ValueError(f"family must be one of {FAMILIES}, not {family!r}")
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def make_family_checkpoint(tmp_path: Path, family: str, *, seed: int = 0, **overrides: Any) -> Path:
    """Write a tiny random ``family`` checkpoint (weights, config, tokenizer) and return its directory."""
    root = Path(tmp_path) / f"tiny-{family}-{seed}"
    root.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(add_bos=False)
    config = make_family_config(family, len(tokenizer), **overrides)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).float().eval()
    _spread_hybrid_params(model)
    model.save_pretrained(root)
    tokenizer.save_pretrained(root)
    return root


def _spread_hybrid_params(model: torch.nn.Module) -> None:
    """Give zero-initialised norms and the decay parameters random values, so every weight matters."""
    gen = torch.Generator().manual_seed(123)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("dt_bias"):
                p.copy_(p + 0.3 * torch.randn(p.shape, generator=gen))
            elif name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(-5.0, -1.5, generator=gen))


def make_multimodal_qwen3_5_checkpoint(tmp_path: Path, *, seed: int = 0) -> Path:
    """A tiny ``Qwen3_5ForConditionalGeneration`` (text model under ``model.language_model.`` + a vision tower)."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    root = Path(tmp_path) / f"tiny-qwen3_5-vl-{seed}"
    root.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(add_bos=False)
    text = make_family_config("qwen3_5", len(tokenizer)).to_dict()
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                  num_position_embeddings=64)
    config = Qwen3_5Config(text_config=text, vision_config=vision, image_token_id=5, video_token_id=6,
                           vision_start_token_id=7, vision_end_token_id=8)
    torch.manual_seed(seed)
    model = Qwen3_5ForConditionalGeneration(config).float().eval()
    _spread_hybrid_params(model)
    model.save_pretrained(root)
    tokenizer.save_pretrained(root)
    return root
