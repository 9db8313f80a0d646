"""Input-major storage of wide float32 CPU weights: same values, same results, other weights untouched."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import LlamaConfig

from revolta_engine.engine.model_builder import build_model, fill_dummy_weights
from revolta_engine.layers.cpu_layout import use_cpu_decode_layout


def _tiny(tie: bool, dtype: torch.dtype = torch.float32):
    config = LlamaConfig(hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=2,
                         num_hidden_layers=2, vocab_size=300, tie_word_embeddings=tie,
                         architectures=["LlamaForCausalLM"])
    model = build_model(config, 128, dtype, torch.device("cpu"))
    fill_dummy_weights(model, 0)
    return model


def test_wide_weights_become_input_major_with_unchanged_values():
    model = _tiny(tie=True)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    assert use_cpu_decode_layout(model) == 2 * 3 + 1  # qkv, o (square), gate_up per layer + tied head
    layer = model.model.layers[0]
    assert layer.mlp.gate_up_proj.weight.stride() == (1, 320)
    assert layer.self_attn.qkv_proj.weight.stride() == (1, 128)
    assert layer.mlp.down_proj.weight.is_contiguous()  # taller than wide: faster as it is
    assert model.model.embed_tokens.weight.stride() == (1, 300)
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name
    x = torch.randn(3, 64)
    torch.testing.assert_close(layer.mlp.gate_up_proj(x), F.linear(x, before["model.layers.0.mlp.gate_up_proj.weight"]))
    ids = torch.tensor([0, 299, 17])
    assert torch.equal(model.model.embed_tokens(ids), before["model.embed_tokens.weight"][ids])
    logits = model.compute_logits(x)
    torch.testing.assert_close(logits, F.linear(x, before["model.embed_tokens.weight"]))


def test_untied_head_is_restored_and_embedding_kept():
    model = _tiny(tie=False)
    use_cpu_decode_layout(model)
    assert model.lm_head.stride() == (1, 300)
    assert model.model.embed_tokens.weight.is_contiguous()


def test_other_dtypes_are_left_alone():
    model = _tiny(tie=True, dtype=torch.bfloat16)
    assert use_cpu_decode_layout(model) == 0
    assert all(p.is_contiguous() for p in model.parameters())
