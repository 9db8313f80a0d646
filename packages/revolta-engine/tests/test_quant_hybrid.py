"""Quantized Qwen3.5 (hybrid Gated DeltaNet + attention), per-module quantization rules, and quantized MoE
checkpoints (quantized or dense experts): each decodes like its dequantized twin."""

from __future__ import annotations

import pytest
import torch
from checkpoints import make_tiny_checkpoint
from hybrid_checkpoints import make_family_checkpoint, make_multimodal_qwen3_5_checkpoint
from parity import assert_greedy_parity, reference_greedy
from transformers import AutoModelForCausalLM

from revolta_engine import LLM, SamplingParams
from revolta_engine.errors import UnsupportedModelError
from revolta_engine.layers.quant import QuantConfig, make_linear_method, parse_quant_config
from revolta_engine.quantize import quantize_checkpoint

GREEDY = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
# every projection input (hidden 128, intermediate 256, attention 4 x 32, Gated DeltaNet values 4 x 32) is a
# multiple of the largest group, 128
HYBRID_SIZES = dict(hidden_size=128, intermediate_size=256, head_dim=32, linear_key_head_dim=32,
                    linear_value_head_dim=32, moe_intermediate_size=128, shared_expert_intermediate_size=128)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("quant-hybrid")
    made: dict = {}

    def get(family: str):
        if family not in made:
            made[family] = (make_tiny_checkpoint(root, "llama", hidden_size=128, intermediate_size=256, head_dim=32)
                            if family == "llama" else make_family_checkpoint(root, family, **HYBRID_SIZES))
        return made[family]

    return get


def _greedy_parity(quant_dir, dense_dir, ref_cls=AutoModelForCausalLM, lengths=(7, 45)) -> LLM:
    ref_model = ref_cls.from_pretrained(dense_dir, dtype=torch.float32).eval()
    llm = LLM(str(quant_dir), dtype="float32", max_model_len=256)
    vocab = getattr(ref_model.config, "text_config", ref_model.config).vocab_size
    gen = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in lengths]
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY)
    for prompt, out in zip(prompts, outs, strict=True):
        assert_greedy_parity(ref_model, prompt, out.outputs[0].token_ids,
                             reference_greedy(ref_model, prompt, GREEDY.max_tokens))
    return llm


@pytest.mark.parametrize(
    ("method", "bits", "group", "act_order"),
    [("awq", 4, 128, False), ("awq", 4, 32, False), ("gptq", 8, 64, False), ("gptq", 4, 64, True),
     ("gptq", 4, -1, False)],
)
def test_quantized_qwen3_5_greedy_equals_dequantized_model(sources, tmp_path, method, bits, group, act_order):
    q, d = tmp_path / "q", tmp_path / "d"
    quantize_checkpoint(sources("qwen3_5"), q, method, bits, group, act_order=act_order, dequantized_dst=d)
    model = _greedy_parity(q, d).llm_engine.model
    gdn = model.model.layers[0].linear_attn
    assert gdn.in_proj.quant is not None and gdn.out_proj.quant is not None
    assert gdn.in_proj_ba is not None and gdn.in_proj_ba.quant is None  # b / a stay fp16, as quantizers leave them
    attn, mlp = model.model.layers[1].self_attn, model.model.layers[1].mlp
    assert all(m.quant is not None for m in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj))


def test_multimodal_qwen3_5_checkpoint_takes_its_top_level_quantization(tmp_path):
    """A quantized Qwen3_5ForConditionalGeneration keeps quantization_config at the top of config.json and its
    decoder under model.language_model; the per-module rules name modules there."""
    from transformers import Qwen3_5ForConditionalGeneration

    src = make_multimodal_qwen3_5_checkpoint(tmp_path)
    q, d = tmp_path / "q", tmp_path / "d"
    rule = {r"-:model\.language_model\.layers\.2\.mlp\..*": {}}
    quantize_checkpoint(src, q, "gptq", 4, 32, dequantized_dst=d, dynamic=rule)
    model = _greedy_parity(q, d, Qwen3_5ForConditionalGeneration, lengths=(30,)).llm_engine.model
    assert model.model.layers[0].mlp.down_proj.quant is not None
    assert model.model.layers[2].mlp.down_proj.quant is None


def test_dynamic_rules_keep_modules_dense_or_change_their_bits(sources, tmp_path):
    q, d = tmp_path / "q", tmp_path / "d"
    rules = {r"-:.*\.mlp\.down_proj": {}, r"+:model\.layers\.1\..*": {"bits": 8, "group_size": 32}}
    quantize_checkpoint(sources("llama"), q, "gptq", 4, 64, dequantized_dst=d, dynamic=rules)
    layers = _greedy_parity(q, d).llm_engine.model.model.layers
    assert all(layer.mlp.down_proj.quant is None for layer in layers)
    assert layers[0].self_attn.qkv_proj.quant.bits == 4 and layers[0].self_attn.qkv_proj.group_size == 64
    assert layers[1].self_attn.o_proj.quant.bits == 8 and layers[1].mlp.gate_up_proj.group_size == 32


def test_dynamic_rule_semantics():
    cfg = type("C", (), {"quantization_config": {
        "quant_method": "gptq", "bits": 4, "group_size": 128,
        "dynamic": {r"-:.*\.layers\.0\..*": {}, r".*\.v_proj": {"bits": 8}, r"+:.*\.layers\.[0-9]+\..*": {"bits": 8}},
    }})()
    qc = parse_quant_config(cfg)
    assert qc is not None
    assert qc.for_module("model.layers.0.mlp.down_proj") is None  # the first rule that matches decides
    assert qc.for_module("model.layers.3.mlp.down_proj").bits == 8
    assert qc.for_module("lm_head") is qc
    with pytest.raises(UnsupportedModelError, match="qkv_proj .*differently"):
        make_linear_method(QuantConfig("gptq", 4, 128, dynamic=((r".*\.v_proj", (("bits", 8),)),)),
                           "model.layers.5.self_attn.qkv_proj",
                           tuple(f"model.layers.5.self_attn.{p}_proj" for p in "qkv"))
    for dynamic, match in (({"-:(": {}}, "not a regex"), ({".*": {"bits": 3}}, "3 bits")):
        cfg.quantization_config = {"quant_method": "gptq", "bits": 4, "group_size": 128, "dynamic": dynamic}
        with pytest.raises(UnsupportedModelError, match=match):
            parse_quant_config(cfg).for_module("model.layers.0.mlp.up_proj")


@pytest.mark.parametrize(("family", "method", "bits", "group", "act_order"), [
    ("qwen3_moe", "awq", 4, 64, False), ("qwen3_moe", "gptq", 4, 32, True), ("qwen3_5_moe", "awq", 4, 128, False),
    ("qwen3_next", "gptq", 8, 64, False),
])
def test_quantized_experts_decode_like_the_dequantized_model(sources, tmp_path, family, method, bits, group,
                                                              act_order):
    """Checkpoints that quantize the experts (Qwen3-30B-A3B-AWQ, Qwen3.6-35B-A3B-AWQ): every expert stays packed,
    one quantized MLP per expert. (Qwen3-Next keeps its Gated DeltaNet dense here: its interleaved input
    projections cannot be quantized.)"""
    from revolta_engine.layers.quant_moe import QuantizedExperts

    q, d = tmp_path / "q", tmp_path / "d"
    dense_gdn = {r"-:.*\.linear_attn\..*": {}} if family == "qwen3_next" else None
    quantize_checkpoint(sources(family), q, method, bits, group, act_order=act_order, dequantized_dst=d,
                        dynamic=dense_gdn)
    model = _greedy_parity(q, d).llm_engine.model
    experts = model.model.layers[0].mlp.experts
    assert isinstance(experts, QuantizedExperts) and len(experts) == model.config.num_experts
    assert experts[0].gate_up_proj.quant is not None and experts[0].down_proj.quant.bits == bits
    # stacked for the grouped (graph-capturable) decode path, unless gate/up gathers its input (act-order)
    assert (experts.stacked is None) == act_order
    assert experts.can_run_grouped == (not act_order)  # stacked: decode steps are captured in CUDA graphs
    if experts.stacked is not None:
        gate_up, down = experts.stacked
        assert experts[3].gate_up_proj.qweight.data_ptr() == gate_up.qweight[3].data_ptr()  # views: no second copy
        assert experts[3].down_proj.scales.data_ptr() == down.scales[3].data_ptr()
        gen = torch.Generator().manual_seed(3)
        x = torch.randn(6, model.config.hidden_size, generator=gen)
        top_k = model.config.num_experts_per_tok
        ids = torch.stack([torch.randperm(len(experts), generator=gen)[:top_k] for _ in range(6)])
        weights = torch.rand(6, top_k, generator=gen)
        assert not experts.runs_grouped(x, top_k) and not experts.runs_sorted(x, top_k)  # the CPU: the loop
        torch.testing.assert_close(experts.grouped(x, weights, ids), experts(x, weights, ids), rtol=1e-5, atol=1e-6)
        # the GPU prefill's sorted-rows path (one quant_moe_gemm per projection), here through the ops' references
        torch.testing.assert_close(experts.sorted_gemm(x, weights, ids), experts(x, weights, ids), rtol=1e-5,
                                   atol=1e-6)
        # the whole block's decode path (routing, routed rows, weighted sum with the gated shared expert as ops);
        # a shared expert (Qwen3.5) is stacked after the experts, its parameters views too
        block = model.model.layers[0].mlp
        if block.shared_expert is None:
            assert experts.shared_id == -1
        else:
            assert experts.shared_id == len(experts) == gate_up.qweight.shape[0] - 1
            assert block.shared_expert.down_proj.qweight.data_ptr() == down.qweight[len(experts)].data_ptr()
        torch.testing.assert_close(block._quant_block(x, block.gate(x)), block(x), rtol=1e-5, atol=1e-6)
    dummy = LLM(str(q), dtype="float32", max_model_len=64, load_format="dummy")  # for speed runs without weights
    assert len(dummy.generate({"prompt_token_ids": [5, 6, 7]}, GREEDY)[0].outputs[0].token_ids) == GREEDY.max_tokens


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen3_5_moe"])
def test_moe_checkpoint_with_dense_experts_runs_its_quantized_layers(sources, tmp_path, family):
    """GPTQModel can leave the experts unquantized (a ``-:`` rule): attention, Gated DeltaNet and the shared expert
    are then quantized and the fp16 experts run as before."""
    q, d = tmp_path / "q", tmp_path / "d"
    quantize_checkpoint(sources(family), q, "gptq", 4, 64, dequantized_dst=d, dynamic={r"-:.*\.experts\..*": {}})
    model = _greedy_parity(q, d).llm_engine.model
    moe_layer = model.model.layers[0]
    assert moe_layer.mlp.experts.gate_up_proj.dtype == torch.float32
    if family == "qwen3_5_moe":
        assert moe_layer.mlp.shared_expert.down_proj.quant is not None
        assert moe_layer.linear_attn.in_proj.quant is not None
