"""Quantized checkpoints: file formats, rejected configs and malformed tensors, dummy weights."""

from __future__ import annotations

import json

import pytest
import torch
from checkpoints import make_tiny_checkpoint
from safetensors.torch import load_file, save_file

from revolta_engine import LLM, SamplingParams
from revolta_engine.errors import InvalidRequestError, ModelLoadError, UnsupportedModelError
from revolta_engine.layers.quant import parse_quant_config
from revolta_engine.quantize import QuantizedMatrix, quantize_checkpoint, rtn_quantize, to_awq, to_gptq

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
        ({"quant_method": "gptq", "bits": 4, "group_size": 128, "lm_head": True}, "lm_head"),
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


def test_act_order_quantizer_groups_permuted_channels():
    w = torch.randn(16, 64, generator=torch.Generator().manual_seed(1))
    order = torch.randperm(64, generator=torch.Generator().manual_seed(2))
    m = rtn_quantize(w, 4, 16, sym=False, order=order)
    plain = rtn_quantize(w[:, order], 4, 16, sym=False)
    assert torch.equal(torch.bincount(m.groups()), torch.full((4,), 16))
    assert torch.equal(m.groups()[order], torch.arange(64) // 16)  # group j holds channels order[16 j: 16 j + 16]
    torch.testing.assert_close(m.dequantized()[:, order], plain.dequantized(), rtol=0, atol=0)
    assert torch.equal(to_gptq(m, 4)["g_idx"], m.groups().to(torch.int32))


def _set_g_idx(name: str, g_idx: torch.Tensor):
    return lambda t: t.update({name: g_idx.to(torch.int32)})


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (_set_g_idx("model.layers.0.self_attn.o_proj.g_idx", torch.arange(128) % 3),
         r"'model\.layers\.0\.self_attn\.o_proj\.g_idx'.*groups of 0-43 input channels; act-order checkpoints "
         r"have exactly 32"),
        (_set_g_idx("model.layers.1.mlp.down_proj.g_idx", torch.arange(256) // 16),
         r"'model\.layers\.1\.mlp\.down_proj\.g_idx'.*groups outside 0\.\.7"),
        (_set_g_idx("model.layers.0.self_attn.k_proj.g_idx", torch.arange(128).flip(0) // 32),
         r"'model\.layers\.0\.self_attn\.[kqv]_proj\.g_idx'.*differs between the parts of this merged projection"),
    ],
)
def test_malformed_act_order_g_idx_is_rejected_naming_the_tensor(base, tmp_path, edit, match):
    quantize_checkpoint(base, tmp_path / "q", "gptq", 4, 32, act_order=True)
    _edit(tmp_path / "q", edit)
    with pytest.raises(ModelLoadError, match=match):
        LLM(str(tmp_path / "q"), dtype="float32", max_model_len=64)


def test_act_order_layers_sort_their_rows_and_gather_the_input(base, tmp_path):
    quantize_checkpoint(base, tmp_path / "q", "gptq", 4, 32, act_order=True, dequantized_dst=tmp_path / "dense")
    quant = LLM(str(tmp_path / "q"), dtype="float32", max_model_len=64).llm_engine.model
    dense = LLM(str(tmp_path / "dense"), dtype="float32", max_model_len=64).llm_engine.model
    qkv = quant.model.layers[0].self_attn.qkv_proj
    ckpt_g_idx = load_file(str(tmp_path / "q" / "model.safetensors"))["model.layers.0.self_attn.q_proj.g_idx"]
    assert qkv.act_perm.dtype == torch.int32  # as the kernels read it
    assert not torch.equal(qkv.act_perm.long(), torch.arange(128))
    assert torch.equal(ckpt_g_idx.long()[qkv.act_perm], torch.arange(128) // 32)
    assert torch.equal(qkv.g_idx.long(), torch.arange(128) // 32)  # the sorted rows' groups
    qkv.quant.finish_loading(qkv)  # nothing left to sort
    assert torch.equal(qkv.g_idx.long(), torch.arange(128) // 32)
    assert "act_perm" not in dict(quant.named_parameters()) and "act_perm" not in quant.state_dict()
    for name in ("self_attn.qkv_proj", "self_attn.o_proj"):
        q, d = quant.model.layers[1].get_submodule(name), dense.model.layers[1].get_submodule(name)
        x = torch.randn(3, q.in_features, generator=torch.Generator().manual_seed(4))
        torch.testing.assert_close(q(x), d(x), rtol=1e-5, atol=1e-5)
    # the down projection's order lives in gate/up's output columns: only the whole MLP matches its twin
    mlp, dense_mlp = quant.model.layers[1].mlp, dense.model.layers[1].mlp
    assert getattr(mlp.down_proj, "act_perm", None) is None and mlp.gate_up_proj.act_perm is not None
    assert mlp.down_proj.order_code  # ...and it runs the act-order kernel's code (a schedule hint) after gate/up
    assert not quant.model.layers[1].self_attn.o_proj.order_code
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(mlp(x), dense_mlp(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="only in GPTQ"):
        quantize_checkpoint(base, tmp_path / "awq", "awq", 4, 32, act_order=True)


def test_group_that_does_not_divide_the_layer_is_rejected(base, tmp_path):
    quantize_checkpoint(base, tmp_path / "q", "gptq", 4, 32)
    cfg_path = tmp_path / "q" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization_config"]["group_size"] = 96
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="group size 96"):
        LLM(str(tmp_path / "q"), dtype="float32", max_model_len=64)


@pytest.mark.parametrize(("method", "bits", "act_order"), [("awq", 4, False), ("gptq", 8, False), ("gptq", 4, True)])
def test_dummy_weights_work_for_quantized_configs(base, tmp_path, method, bits, act_order):
    quantize_checkpoint(base, tmp_path / "q", method, bits, 64, act_order=act_order)
    llm = LLM(str(tmp_path / "q"), dtype="float32", max_model_len=64, load_format="dummy")
    params = dict(llm.llm_engine.model.named_parameters())
    assert params["model.layers.0.mlp.down_proj.qweight"].dtype == torch.int32
    assert bool((params["model.layers.0.mlp.down_proj.qweight"] != 0).any())
    out = llm.generate({"prompt_token_ids": [5, 6, 7]}, SamplingParams(temperature=0.0, max_tokens=4,
                                                                      ignore_eos=True))[0]
    assert len(out.outputs[0].token_ids) == 4
    modules = dict(llm.llm_engine.model.named_modules())
    perm = getattr(modules["model.layers.0.mlp.gate_up_proj"], "act_perm", None)
    assert (perm is not None) == act_order  # act-order dummies are repacked and gather like loaded ones
    assert modules["model.layers.0.mlp.down_proj"].order_code == act_order
    if act_order:
        assert torch.equal(torch.sort(perm).values.long(), torch.arange(128))


@pytest.mark.parametrize("requested, ok", [("awq", True), ("AWQ_Marlin", True), ("gptq", False), (None, True)])
def test_vllm_quantization_flag_is_checked_against_the_checkpoint(base, tmp_path, requested, ok):
    """vLLM's --quantization: a name matching the checkpoint's scheme loads it; another one stops at startup."""
    dst = quantize_checkpoint(base, tmp_path / "awq", "awq", group_size=32)
    if ok:
        assert LLM(str(dst), dtype="float32", max_model_len=64, quantization=requested).generate(
            [1, 2, 3], SamplingParams(temperature=0.0, max_tokens=2))[0].outputs[0].token_ids
        return
    with pytest.raises(InvalidRequestError, match="needs a gptq checkpoint, but .* is quantized with awq"):
        LLM(str(dst), dtype="float32", max_model_len=64, quantization=requested)


@pytest.mark.parametrize("requested, match", [("awq", "is not quantized"), ("fp8", "'fp8' is not supported")])
def test_vllm_quantization_flag_on_a_16_bit_checkpoint_is_refused(base, requested, match):
    with pytest.raises(InvalidRequestError, match=match):
        LLM(str(base), dtype="float32", max_model_len=64, quantization=requested)


@pytest.mark.parametrize(("method", "side_file", "settings"), [
    ("gptq", "quantize_config.json", lambda qc: {k: v for k, v in qc.items() if k != "quant_method"}),  # AutoGPTQ
    ("gptq", "quantize_config.json", lambda qc: qc),
    ("awq", "quant_config.json", lambda qc: {"zero_point": True, "q_group_size": qc["group_size"], "w_bit": 4,
                                             "version": "GEMM"}),  # AutoAWQ's own file
])
def test_quantization_settings_beside_config_json(base, tmp_path, method, side_file, settings):
    """Older checkpoints keep the settings in quantize_config.json / quant_config.json, as vLLM also reads."""
    quantize_checkpoint(base, tmp_path / "q", method, 4, 32)
    config = json.loads((tmp_path / "q" / "config.json").read_text())
    qc = config.pop("quantization_config")
    (tmp_path / "q" / "config.json").write_text(json.dumps(config))
    prompt = {"prompt_token_ids": [5, 9, 13, 2, 7, 11]}
    greedy = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    with pytest.raises(ModelLoadError):  # the packed tensors are not read as 16-bit weights without the settings
        LLM(str(tmp_path / "q"), dtype="float32", max_model_len=64)
    (tmp_path / "q" / side_file).write_text(json.dumps(settings(qc)))
    side = LLM(str(tmp_path / "q"), dtype="float32", max_model_len=64)
    assert parse_quant_config(side.llm_engine.hf_config).method == method
    config["quantization_config"] = qc
    (tmp_path / "q" / "config.json").write_text(json.dumps(config))
    (tmp_path / "q" / side_file).unlink()
    inside = LLM(str(tmp_path / "q"), dtype="float32", max_model_len=64)
    assert side.generate(prompt, greedy)[0].outputs[0].token_ids == inside.generate(prompt, greedy)[0].outputs[0].token_ids
