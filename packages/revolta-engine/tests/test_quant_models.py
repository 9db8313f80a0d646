"""AWQ and GPTQ checkpoints (written by the RTN quantizer) load and decode like their dequantized twins."""

from __future__ import annotations

import pytest
import torch
from checkpoints import make_tiny_checkpoint
from parity import assert_greedy_parity, reference_greedy
from transformers import AutoModelForCausalLM

from revolta_engine import LLM, SamplingParams
from revolta_engine.quantize import quantize_checkpoint

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
# hidden 128 / intermediate 256 so every projection's input is a multiple of the largest group (128).
SIZES = dict(hidden_size=128, intermediate_size=256, head_dim=32)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("quant")
    return {arch: make_tiny_checkpoint(root, arch, **SIZES) for arch in ("llama", "qwen2", "qwen3")}


def _prompts(vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(3)
    return [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in (6, 37)]


@pytest.mark.parametrize(
    ("arch", "method", "bits", "group", "sym"),
    [
        ("llama", "awq", 4, 32, False),
        ("llama", "awq", 4, 64, False),
        ("qwen2", "awq", 4, 128, False),
        ("llama", "gptq", 4, 128, True),
        ("qwen2", "gptq", 4, 32, False),
        ("llama", "gptq", 8, 64, True),
        ("llama", "gptq", 8, 128, False),
        ("llama", "gptq", 4, -1, False),
        ("qwen3", "gptq", 4, 64, False),
    ],
)
def test_quantized_greedy_equals_dequantized_model(base, tmp_path, arch, method, bits, group, sym):
    _check_greedy_parity(base[arch], tmp_path, method, bits, group, sym)


@pytest.mark.parametrize(
    ("arch", "bits", "group", "sym"),
    [("llama", 4, 32, False), ("qwen3", 8, 64, True), ("qwen2", 4, 128, False)],
)
def test_act_order_gptq_greedy_equals_dequantized_model(base, tmp_path, arch, bits, group, sym):
    _check_greedy_parity(base[arch], tmp_path, "gptq", bits, group, sym, act_order=True)


def _check_greedy_parity(src, tmp_path, method, bits, group, sym, act_order=False):
    quant_dir, dense_dir = tmp_path / "q", tmp_path / "dense"
    quantize_checkpoint(src, quant_dir, method, bits, group, sym, act_order=act_order, dequantized_dst=dense_dir)
    ref_model = AutoModelForCausalLM.from_pretrained(dense_dir, dtype=torch.float32).eval()
    llm = LLM(str(quant_dir), dtype="float32", max_model_len=256)
    prompts = _prompts(ref_model.config.vocab_size)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY)
    for prompt, out in zip(prompts, outs, strict=True):
        ref = reference_greedy(ref_model, prompt, GREEDY.max_tokens)
        assert_greedy_parity(ref_model, prompt, out.outputs[0].token_ids, ref)


def test_quantized_and_dequantized_logits_agree(base, tmp_path):
    quant_dir, dense_dir = tmp_path / "q", tmp_path / "dense"
    quantize_checkpoint(base["llama"], quant_dir, "awq", 4, 64, dequantized_dst=dense_dir)
    quant = LLM(str(quant_dir), dtype="float32", max_model_len=128).llm_engine.model
    dense = LLM(str(dense_dir), dtype="float32", max_model_len=128).llm_engine.model
    layer_q, layer_d = quant.model.layers[0], dense.model.layers[0]
    x = torch.randn(5, 128, generator=torch.Generator().manual_seed(0))
    for name in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"):
        q, d = layer_q.get_submodule(name), layer_d.get_submodule(name)
        xin = x if q.in_features == 128 else torch.randn(5, q.in_features)
        torch.testing.assert_close(q(xin), d(xin), rtol=1e-5, atol=1e-5)


def test_only_projections_are_quantized(base, tmp_path):
    quantize_checkpoint(base["llama"], tmp_path / "q", "gptq", 4, 32)
    model = LLM(str(tmp_path / "q"), dtype="float32", max_model_len=128).llm_engine.model
    params = dict(model.named_parameters())
    assert params["model.layers.0.self_attn.qkv_proj.qweight"].dtype == torch.int32
    assert params["model.layers.0.self_attn.qkv_proj.qweight"].shape == (128 // 8, 128 + 64 + 64)
    assert params["model.layers.0.mlp.gate_up_proj.qzeros"].shape == (128 // 32, 512 // 8)
    assert params["model.layers.1.mlp.down_proj.scales"].shape == (256 // 32, 128)
    assert params["model.embed_tokens.weight"].dtype == torch.float32
    assert params["lm_head"].dtype == torch.float32
    assert not any(n.endswith("proj.weight") for n in params)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(("method", "bits", "act_order"), [("awq", 4, False), ("gptq", 8, False), ("gptq", 4, True)])
def test_fp16_cuda_layers_match_dequantized_twin(base, tmp_path, method, bits, act_order):
    quant_dir, dense_dir = tmp_path / "q", tmp_path / "dense"
    quantize_checkpoint(base["qwen2"], quant_dir, method, bits, 32, act_order=act_order, dequantized_dst=dense_dir)
    kw = dict(dtype="float16", device="cuda", max_model_len=128, kv_cache_memory_bytes=2**24)
    quant = LLM(str(quant_dir), **kw).llm_engine.model
    dense = LLM(str(dense_dir), **kw).llm_engine.model
    # act-order: the down projection's input order lives in gate/up's output columns, so the MLP is compared whole
    mlp = ("mlp",) if act_order else ("mlp.gate_up_proj", "mlp.down_proj")
    for m in (1, 5, 40):  # skinny kernel and tensor-core GEMM
        for name in ("self_attn.qkv_proj", "self_attn.o_proj", *mlp):
            q, d = quant.model.layers[1].get_submodule(name), dense.model.layers[1].get_submodule(name)
            x = torch.randn(m, getattr(q, "in_features", SIZES["hidden_size"]), device="cuda", dtype=torch.float16)
            got, want = q(x).float(), d(x).float()
            if name == "mlp":  # two fp16 GEMMs and the fp16 SiLU-and-mul between them: compared by relative L2 error
                assert float(torch.linalg.norm(got - want) / torch.linalg.norm(want)) < 1e-2, (m, name)
            else:
                torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_act_order_cuda_graphs_decode_as_eager(base, tmp_path):
    """Act-order layers gather their input and skip the fused-norm/SiLU kernels; graphs replay the same path.
    (Head size 64: the native decode attention's smallest, so the step is capturable at all.)"""
    src = make_tiny_checkpoint(tmp_path / "base", "llama", hidden_size=256, intermediate_size=512, head_dim=64,
                               num_attention_heads=4, num_key_value_heads=2)
    quantize_checkpoint(src, tmp_path / "q", "gptq", 4, 128, act_order=True)
    kw = dict(dtype="float16", device="cuda", max_model_len=256, max_num_seqs=4, kv_cache_memory_bytes=2**26)
    graphed, eager = LLM(str(tmp_path / "q"), **kw), LLM(str(tmp_path / "q"), enforce_eager=True, **kw)
    assert graphed.llm_engine.runner.graph_runner is not None
    prompts = [{"prompt_token_ids": p} for p in _prompts(graphed.llm_engine.hf_config.vocab_size)]
    got = [o.outputs[0].token_ids for o in graphed.generate(prompts, GREEDY)]
    assert got == [o.outputs[0].token_ids for o in eager.generate(prompts, GREEDY)]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_int8_activations_engine_option_on_cuda(base, tmp_path):
    """activation_quant="int8" gives the engine's quantized layers int8 activations and an engine without it, built
    after, keeps fp16 ones; the int8 engine's int4 decode projections leave the fp16 path's results but stay within
    int8 rounding of the dequantized twin (relative L2 error)."""
    import revolta_kernels

    if not revolta_kernels.native_available():
        pytest.skip(revolta_kernels.native_status())
    quant_dir, dense_dir = tmp_path / "q", tmp_path / "dense"
    quantize_checkpoint(base["qwen2"], quant_dir, "awq", 4, 32, dequantized_dst=dense_dir)
    kw = dict(dtype="float16", device="cuda", max_model_len=128, kv_cache_memory_bytes=2**24)
    names = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
    int8 = LLM(str(quant_dir), activation_quant="int8", **kw).llm_engine
    assert int8.config.values["activation_quant"].value == "int8"
    plain = LLM(str(quant_dir), **kw).llm_engine.model.model.layers[1]
    dense = LLM(str(dense_dir), **kw).llm_engine.model.model.layers[1]
    layer = int8.model.model.layers[1]
    for n in names:
        x = torch.randn(1, layer.get_submodule(n).in_features, device="cuda", dtype=torch.float16)
        assert layer.get_submodule(n).int8_activations and not plain.get_submodule(n).int8_activations
        got, fp16 = layer.get_submodule(n)(x).float(), plain.get_submodule(n)(x).float()
        want = dense.get_submodule(n)(x).float()
        assert not torch.equal(got, fp16), f"{n}: int8 activations did not change the kernel"
        assert float(torch.linalg.norm(got - want) / torch.linalg.norm(want)) < 3e-2, n
