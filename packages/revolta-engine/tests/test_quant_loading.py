"""Quantized checkpoints: file formats, rejected configs and malformed tensors, dummy weights."""

from __future__ import annotations

import json

import pytest
import torch
from checkpoints import make_tiny_checkpoint
from safetensors.torch import load_file, save_file

from revolta_engine import LLM, SamplingParams
from revolta_engine.errors import ModelLoadError, UnsupportedModelError
from revolta_engine.layers.quant import parse_quant_config
from revolta_engine.quantize import QuantizedMatrix, quantize_checkpoint, to_awq, to_gptq

SIZES = dict(hidden_size=128, intermediate_size=256, head_dim=32)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("quant-load"), "llama", **SIZES)


def test_awq_word_layout_is_autoawq_interleaved():
    # Column j holds value j: AutoAWQ puts column (0, 2, 4, 6, 1, 3, 5, 7)[i] in field i.
    q = torch.arange(8).repeat(32, 1)
    m = QuantizedMatrix(q, q[:1].clone(), torch.ones(1, 8).half(), 32)
    packed = to_awq(m)
    assert packed["qweight"].shape == (32, 1) and int(packed["qweight"][0, 0]) == 0x75316420
    assert int(packed["qzeros"][0, 0]) == 0x75316420


def test_gptq_word_layout_packs_k_and_stores_zero_minus_one():
    q = (torch.arange(32) % 8).view(32, 1).repeat(1, 8)
    m = QuantizedMatrix(q, torch.full((1, 8), 8), torch.ones(1, 8).half(), 32)
    packed = to_gptq(m, 4)
    assert packed["qweight"].shape == (4, 8) and int(packed["qweight"][0, 0]) == 0x76543210
    assert packed["qzeros"].shape == (1, 1) and int(packed["qzeros"][0, 0]) == 0x77777777
    assert torch.equal(packed["g_idx"], torch.zeros(32, dtype=torch.int32))


@pytest.mark.parametrize(
    ("qc", "match"),
    [
        ({"quant_method": "bitsandbytes"}, "not supported"),
        ({"quant_method": "gptq", "bits": 3, "group_size": 128}, "3 bits"),
        ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"}, "gemv"),
        ({"quant_method": "awq", "bits": 8, "group_size": 128}, "8 bits"),
        ({"quant_method": "gptq", "bits": 4, "group_size": 100}, "group_size 100"),
    ],
)
def test_unsupported_quantization_configs_are_rejected(qc, match):
    config = type("C", (), {"quantization_config": qc})()
    with pytest.raises(UnsupportedModelError, match=match):
        parse_quant_config(config)


def test_gptq_v1_v2_and_awq_configs_parse():
    cfg = type("C", (), {})
    cfg.quantization_config = {"quant_method": "gptq", "bits": 8, "group_size": -1, "desc_act": False}
    assert parse_quant_config(cfg) is not None and parse_quant_config(cfg).zero_offset == 1
    cfg.quantization_config = {"quant_method": "gptq", "bits": 4, "group_size": 64, "checkpoint_format": "gptq_v2"}
    assert parse_quant_config(cfg).zero_offset == 0
    cfg.quantization_config = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
    q = parse_quant_config(cfg)
    assert q.method == "awq" and q.group_size == 128


def _edit(path, fn) -> None:
    tensors = load_file(str(path / "model.safetensors"))
    fn(tensors)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})


@pytest.mark.parametrize(
    ("method", "edit", "match"),
    [
        ("awq", lambda t: t.pop("model.layers.1.self_attn.o_proj.scales"), r"o_proj\.scales"),
        ("awq", lambda t: t.pop("model.layers.0.self_attn.k_proj.qzeros"), r"qkv_proj\.qzeros \(parts \[1\]\)"),
        ("awq", lambda t: t.update({"model.layers.0.mlp.up_proj.qweight": torch.zeros(128, 8, dtype=torch.int32)}),
         r"'model\.layers\.0\.mlp\.up_proj\.qweight'.*expected shape \(128, 32\)"),
        ("gptq", lambda t: t.update({"model.layers.0.mlp.down_proj.scales": torch.zeros(4, 64).half()}),
         r"'model\.layers\.0\.mlp\.down_proj\.scales'.*expected shape \(8, 128\)"),
        ("gptq", lambda t: t.update({"model.layers.0.self_attn.q_proj.qweight":
                                     t["model.layers.0.self_attn.q_proj.qweight"].float()}),
         r"q_proj\.qweight'.*must be int32"),
    ],
)
def test_malformed_checkpoints_name_the_tensor(base, tmp_path, method, edit, match):
    quantize_checkpoint(base, tmp_path / "q", method, 4, 32)
    _edit(tmp_path / "q", edit)
    with pytest.raises(ModelLoadError, match=match):
        LLM(str(tmp_path / "q"), dtype="float32", max_model_len=64)


def test_act_order_gptq_is_rejected_with_a_clear_message(base, tmp_path):
    quantize_checkpoint(base, tmp_path / "q", "gptq", 4, 32, act_order=True)
    with pytest.raises(ModelLoadError, match=r"g_idx'.*act-order \(desc_act=true"):
        LLM(str(tmp_path / "q"), dtype="float32", max_model_len=64)


def test_group_that_does_not_divide_the_layer_is_rejected(base, tmp_path):
    quantize_checkpoint(base, tmp_path / "q", "gptq", 4, 32)
    cfg_path = tmp_path / "q" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization_config"]["group_size"] = 96
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="group size 96"):
        LLM(str(tmp_path / "q"), dtype="float32", max_model_len=64)


@pytest.mark.parametrize(("method", "bits"), [("awq", 4), ("gptq", 8)])
def test_dummy_weights_work_for_quantized_configs(base, tmp_path, method, bits):
    quantize_checkpoint(base, tmp_path / "q", method, bits, 64)
    llm = LLM(str(tmp_path / "q"), dtype="float32", max_model_len=64, load_format="dummy")
    params = dict(llm.llm_engine.model.named_parameters())
    assert params["model.layers.0.mlp.down_proj.qweight"].dtype == torch.int32
    assert bool((params["model.layers.0.mlp.down_proj.qweight"] != 0).any())
    out = llm.generate({"prompt_token_ids": [5, 6, 7]}, SamplingParams(temperature=0.0, max_tokens=4,
                                                                      ignore_eos=True))[0]
    assert len(out.outputs[0].token_ids) == 4
