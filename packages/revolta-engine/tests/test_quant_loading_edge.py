"""Quantized checkpoints at the edges: scale dtypes, group sizes, GPTQ v2 zeros, per-channel and act-order
groups, modules kept dense, tied embeddings and 16-bit activations on the CPU."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from checkpoints import make_tiny_checkpoint
from parity import assert_greedy_parity, reference_greedy
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from revolta_engine import LLM, SamplingParams
from revolta_engine.errors import ModelLoadError, UnsupportedModelError
from revolta_engine.layers.quant import parse_quant_config
from revolta_engine.quantize import quantize_checkpoint
from revolta_kernels.reference.quant import pack_int32, unpack_int32

SIZES = dict(hidden_size=128, intermediate_size=256, head_dim=32)
GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
PROMPT = [5, 9, 13, 2, 7, 11, 40, 41]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("quant-edge"), "llama", **SIZES)


def _greedy(path, **kw) -> list[int]:
    llm = LLM(str(path), max_model_len=64, **({"dtype": "float32"} | kw))
    return list(llm.generate({"prompt_token_ids": PROMPT}, GREEDY)[0].outputs[0].token_ids)


def _edit_tensors(path, fn) -> None:
    tensors = load_file(str(path / "model.safetensors"))
    fn(tensors)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})


def _edit_config(path, fn) -> None:
    config = json.loads((path / "config.json").read_text())
    fn(config["quantization_config"])
    (path / "config.json").write_text(json.dumps(config))


def _assert_parity(quant_dir, dense_dir, **kw) -> LLM:
    ref = AutoModelForCausalLM.from_pretrained(dense_dir, dtype=torch.float32).eval()
    llm = LLM(str(quant_dir), dtype="float32", max_model_len=64, **kw)
    got = llm.generate({"prompt_token_ids": PROMPT}, GREEDY)[0].outputs[0].token_ids
    assert_greedy_parity(ref, PROMPT, got, reference_greedy(ref, PROMPT, GREEDY.max_tokens))
    return llm


@pytest.mark.parametrize(
    ("method", "name", "dtype"),
    [
        ("awq", "model.layers.0.self_attn.o_proj.scales", torch.int32),
        ("gptq", "model.layers.1.mlp.down_proj.scales", torch.int16),
    ],
)
def test_integer_scales_are_rejected_naming_the_tensor(base, tmp_path, method, name, dtype):
    """Scales stored as integers were cast silently (wrong output); they must stop the load, naming the tensor."""
    quantize_checkpoint(base, tmp_path / "q", method, 4, 32)
    _edit_tensors(tmp_path / "q", lambda t: t.update({name: t[name].to(dtype)}))
    with pytest.raises(ModelLoadError, match=rf"{name.replace('.', '[.]')}'.*scales must be floating point"):
        LLM(str(tmp_path / "q"), dtype="float32", max_model_len=64)


@pytest.mark.parametrize(("method", "dtype"), [("awq", torch.bfloat16), ("gptq", torch.float32)])
def test_scales_in_another_float_dtype_are_cast(base, tmp_path, method, dtype):
    """bf16 or fp32 scales (some AWQ exports) load as the model's dtype, as vLLM casts them."""
    quantize_checkpoint(base, tmp_path / "q", method, 4, 32)
    want = _greedy(tmp_path / "q")

    def cast(tensors):
        for key in [k for k in tensors if k.endswith(".scales")]:
            tensors[key] = tensors[key].to(dtype)

    _edit_tensors(tmp_path / "q", cast)
    # fp16 values are exact in fp32, and these bf16 ones round the same.
    assert _greedy(tmp_path / "q") == want


def test_group_size_zero_is_refused_and_unset_means_128():
    cfg = type("C", (), {})()
    cfg.quantization_config = {"quant_method": "gptq", "bits": 4, "group_size": 0}
    with pytest.raises(UnsupportedModelError, match="group_size 0"):
        parse_quant_config(cfg)
    cfg.quantization_config = {"quant_method": "gptq", "bits": 4, "group_size": None}
    assert parse_quant_config(cfg).group_size == 128


@pytest.mark.parametrize("load_format", ["safetensors", "dummy"])
def test_group_that_does_not_divide_the_intermediate_size_names_the_layer(tmp_path, load_format):
    """Group 128 divides the hidden size (128) but not the MLP's 192 inputs: the error names the down projection."""
    src = make_tiny_checkpoint(tmp_path, "llama", hidden_size=128, intermediate_size=192, head_dim=32)
    quantize_checkpoint(src, tmp_path / "q", "gptq", 4, 64)
    _edit_config(tmp_path / "q", lambda qc: qc.update(group_size=128))
    with pytest.raises(
        ModelLoadError, match=r"model\.layers\.0\.mlp\.down_proj: a 192x128 layer .*group size 128"
    ):
        LLM(str(tmp_path / "q"), dtype="float32", max_model_len=64, load_format=load_format)


@pytest.mark.parametrize(("bits", "sym", "act_order"), [(4, True, False), (8, False, True)])
def test_gptq_v2_zeros_decode_like_v1(base, tmp_path, bits, sym, act_order):
    """checkpoint_format gptq_v2 stores the zero points themselves (v1: zero - 1): same model, same tokens."""
    quantize_checkpoint(base, tmp_path / "v1", "gptq", bits, 32, sym, act_order=act_order)
    shutil.copytree(tmp_path / "v1", tmp_path / "v2")

    def to_v2(tensors):
        for key in [k for k in tensors if k.endswith(".qzeros")]:
            tensors[key] = pack_int32(unpack_int32(tensors[key], bits, 1) + 1, bits, 1)

    _edit_tensors(tmp_path / "v2", to_v2)
    _edit_config(tmp_path / "v2", lambda qc: qc.update(checkpoint_format="gptq_v2"))
    assert _greedy(tmp_path / "v2") == _greedy(tmp_path / "v1")


@pytest.mark.parametrize(
    ("bits", "sym", "act_order"), [(8, False, False), (8, True, False), (4, False, True), (8, True, True)]
)
def test_per_channel_gptq_greedy_equals_dequantized_model(base, tmp_path, bits, sym, act_order):
    """group_size -1 (one group per output channel), 8-bit and with desc_act (every g_idx is 0)."""
    quantize_checkpoint(
        base, tmp_path / "q", "gptq", bits, -1, sym, act_order=act_order, dequantized_dst=tmp_path / "d"
    )
    layer = _assert_parity(tmp_path / "q", tmp_path / "d").llm_engine.model.model.layers[1]
    assert (
        layer.mlp.down_proj.group_size == SIZES["intermediate_size"]
        and layer.mlp.down_proj.quant.bits == bits
    )


@pytest.mark.parametrize("method", ["awq", "gptq"])
def test_modules_to_not_convert_load_as_dense_weights(base, tmp_path, method):
    """modules_to_not_convert (lm_head, a whole MLP) keeps those layers' 16-bit weights, as the checkpoint has them."""
    quantize_checkpoint(base, tmp_path / "q", method, 4, 32, dequantized_dst=tmp_path / "d")
    original = load_file(str(base / "model.safetensors"))
    dense_mlp = {k: v for k, v in original.items() if k.startswith("model.layers.0.mlp.")}

    def keep_dense(tensors):
        for key in [k for k in tensors if k.startswith("model.layers.0.mlp.")]:
            del tensors[key]
        tensors.update(dense_mlp)

    for path in (tmp_path / "q", tmp_path / "d"):
        _edit_tensors(path, keep_dense)
    _edit_config(
        tmp_path / "q", lambda qc: qc.update(modules_to_not_convert=["lm_head", "model.layers.0.mlp"])
    )
    model = _assert_parity(tmp_path / "q", tmp_path / "d").llm_engine.model
    mlp0, mlp1 = model.model.layers[0].mlp, model.model.layers[1].mlp
    assert mlp0.gate_up_proj.quant is None and mlp0.down_proj.quant is None
    assert mlp0.down_proj.weight.dtype == torch.float32 and mlp1.down_proj.qweight.dtype == torch.int32
    assert model.model.layers[0].self_attn.qkv_proj.quant is not None
    dummy = LLM(str(tmp_path / "q"), dtype="float32", max_model_len=64, load_format="dummy")
    assert (
        len(dummy.generate({"prompt_token_ids": PROMPT}, GREEDY)[0].outputs[0].token_ids) == GREEDY.max_tokens
    )


@pytest.mark.parametrize(("arch", "method", "act_order"), [("llama", "awq", False), ("qwen2", "gptq", True)])
def test_tied_embeddings_with_a_quantized_body(tmp_path, arch, method, act_order):
    """lm_head tied to the fp16 embedding (no lm_head tensor in the checkpoint) over quantized projections."""
    src = make_tiny_checkpoint(tmp_path, arch, tie_word_embeddings=True, **SIZES)
    quantize_checkpoint(
        src, tmp_path / "q", method, 4, 64, act_order=act_order, dequantized_dst=tmp_path / "d"
    )
    assert not any(k.startswith("lm_head") for k in load_file(str(tmp_path / "q" / "model.safetensors")))
    model = _assert_parity(tmp_path / "q", tmp_path / "d").llm_engine.model
    assert model.model.layers[0].mlp.down_proj.quant is not None


@pytest.mark.parametrize(("method", "dtype"), [("awq", "bfloat16"), ("gptq", "float16")])
def test_16_bit_activations_on_the_cpu(base, tmp_path, method, dtype):
    """A quantized model asked for bf16 / fp16 on the CPU keeps its scales in that dtype and decodes as the
    float32 run does (the first tokens; rounding may part them later)."""
    quantize_checkpoint(base, tmp_path / "q", method, 4, 32)
    llm = LLM(str(tmp_path / "q"), dtype=dtype, max_model_len=64)
    params = dict(llm.llm_engine.model.named_parameters())
    assert params["model.layers.0.mlp.down_proj.scales"].dtype == getattr(torch, dtype)
    assert params["model.layers.0.mlp.down_proj.qweight"].dtype == torch.int32
    got = list(llm.generate({"prompt_token_ids": PROMPT}, GREEDY)[0].outputs[0].token_ids)
    assert got[:4] == _greedy(tmp_path / "q")[:4]
