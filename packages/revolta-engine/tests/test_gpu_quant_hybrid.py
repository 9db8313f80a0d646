"""GPU tests of quantized Qwen3.5 (marker ``gpu``): the quantized Gated DeltaNet, attention and MLP projections
against the dequantized twin's fp16 layers, float32 greedy decode against transformers, and fp16 decode replayed
from CUDA graphs against eager decode.

Head sizes the native kernels take (attention and Gated DeltaNet heads of 64), hidden 128 so every projection
input is a multiple of the groups used.
"""

from __future__ import annotations

import pytest
import torch
from hybrid_checkpoints import make_family_checkpoint
from parity import assert_greedy_parity, reference_greedy
from transformers import AutoModelForCausalLM

import revolta_kernels
from revolta_engine import LLM, SamplingParams
from revolta_engine.quantize import quantize_checkpoint

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not revolta_kernels.native_available(), reason=revolta_kernels.native_status()),
]

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
SHAPES = dict(hidden_size=128, intermediate_size=256, head_dim=64, linear_key_head_dim=64, linear_value_head_dim=64)
KV = dict(kv_cache_memory_bytes=2**28)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return make_family_checkpoint(tmp_path_factory.mktemp("gpu-quant-hybrid"), "qwen3_5", **SHAPES)


def _prompts(vocab: int, lengths, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in lengths]


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float(torch.linalg.norm(got.float() - want.float()) / torch.linalg.norm(want.float()))


@pytest.mark.parametrize(("method", "bits", "group", "act_order"),
                         [("awq", 4, 64, False), ("gptq", 8, 32, False), ("gptq", 4, 64, True)])
def test_fp16_quantized_layers_match_dequantized_twin(source, tmp_path, method, bits, group, act_order):
    q_dir, d_dir = tmp_path / "q", tmp_path / "d"
    quantize_checkpoint(source, q_dir, method, bits, group, act_order=act_order, dequantized_dst=d_dir)
    kw = dict(dtype="float16", device="cuda", max_model_len=128, **KV)
    quant, dense = LLM(str(q_dir), **kw).llm_engine.model, LLM(str(d_dir), **kw).llm_engine.model
    qg, dg = quant.model.layers[0].linear_attn, dense.model.layers[0].linear_attn
    split = qg.in_proj.out_features
    qa, da = quant.model.layers[1].self_attn, dense.model.layers[1].self_attn
    pairs = [
        (qg.in_proj, lambda x: dg.in_proj(x)[..., :split]),
        (qg.in_proj_ba, lambda x: dg.in_proj(x)[..., split:]),
        (qg.out_proj, dg.out_proj), (qa.qkv_proj, da.qkv_proj), (qa.o_proj, da.o_proj),
        # act-order: the down projection's input order lives in gate/up's output columns: the MLP is compared whole
        (quant.model.layers[1].mlp, dense.model.layers[1].mlp),
    ]
    for m in (1, 5, 40):  # skinny kernel and tensor-core GEMM
        for q_layer, d_layer in pairs:
            k = getattr(q_layer, "in_features", SHAPES["hidden_size"])
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            got, want = q_layer(x), d_layer(x)
            assert got.shape == want.shape
            assert _rel(got, want) < 1e-2, (m, q_layer)


def test_float32_gpu_quantized_decode_matches_transformers(source, tmp_path):
    q_dir, d_dir = tmp_path / "q", tmp_path / "d"
    quantize_checkpoint(source, q_dir, "awq", 4, 64, dequantized_dst=d_dir)
    ref_model = AutoModelForCausalLM.from_pretrained(d_dir, dtype=torch.float32).eval()
    llm = LLM(str(q_dir), dtype="float32", max_model_len=512, **KV)
    prompts = _prompts(ref_model.config.vocab_size, (5, 40, 130), seed=1)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY)
    for prompt, out in zip(prompts, outs, strict=True):
        ref = reference_greedy(ref_model, prompt, GREEDY.max_tokens)
        assert_greedy_parity(ref_model, prompt, out.outputs[0].token_ids, ref)


@pytest.mark.parametrize(("method", "bits", "group"), [("awq", 4, 128), ("gptq", 8, 64)])
def test_fp16_quantized_graph_replay_equals_eager(source, tmp_path, method, bits, group):
    quantize_checkpoint(source, tmp_path / "q", method, bits, group)
    kw = dict(dtype="float16", max_model_len=512, max_num_seqs=8, **KV)
    _assert_graphs_equal_eager(LLM(str(tmp_path / "q"), **kw), LLM(str(tmp_path / "q"), enforce_eager=True, **kw),
                               seed=10)


def _assert_graphs_equal_eager(graphs: LLM, eager: LLM, seed: int) -> None:
    """Greedy batches of 1, 3 and 8 prompts decode the same tokens from captured graphs as eagerly."""
    assert graphs.llm_engine.runner.graph_runner is not None, "graphs were not captured"
    vocab = graphs.llm_engine.hf_config.vocab_size
    for n in (1, 3, 8):
        prompts = [{"prompt_token_ids": p} for p in _prompts(vocab, [9 + 5 * i for i in range(n)], seed=seed + n)]
        got = [o.outputs[0].token_ids for o in graphs.generate(prompts, GREEDY)]
        want = [o.outputs[0].token_ids for o in eager.generate(prompts, GREEDY)]
        assert got == want, f"batch of {n}: graph replay differs from eager"


@pytest.mark.parametrize(("method", "bits", "group"), [("awq", 4, 64), ("gptq", 8, 32)])
@pytest.mark.parametrize("sorted_min_rows", [4, 1])
def test_quantized_experts_on_cuda(tmp_path, monkeypatch, method, bits, group, sorted_min_rows):
    """Quantized MoE experts: the fp16 block against the dequantized twin's fused-experts block on fresh inputs;
    fp16 decode replayed from CUDA graphs equals eager decode; float32 greedy decode against transformers.
    Steps with few rows per expert take the grouped kernels, with routing and the weighted sum with the gated shared
    expert as our ops too, and the others the GEMM over rows sorted by expert (8 experts, top 2: from 16 tokens on at
    4 rows per expert; from 4 at 1, so the 8-sequence graphs capture it too)."""
    from revolta_engine.layers import quant_moe

    monkeypatch.setattr(quant_moe, "SORTED_MIN_ROWS_PER_EXPERT", sorted_min_rows)
    src = make_family_checkpoint(tmp_path / "src", "qwen3_5_moe", moe_intermediate_size=128,
                                 shared_expert_intermediate_size=128, **SHAPES)
    q_dir, d_dir = tmp_path / "q", tmp_path / "d"
    quantize_checkpoint(src, q_dir, method, bits, group, dequantized_dst=d_dir)
    kw = dict(dtype="float16", device="cuda", max_model_len=128, max_num_seqs=8, **KV)
    graphs = LLM(str(q_dir), **kw)
    quant = graphs.llm_engine.model.model.layers[0].mlp
    dense = LLM(str(d_dir), enforce_eager=True, **kw).llm_engine.model.model.layers[0].mlp
    first_sorted = 16 if sorted_min_rows == 4 else 4
    for tokens in (1, 3, 5, 15, 16, 64, quant_moe.GROUPED_MAX_TOKENS + 44):
        x = torch.randn(tokens, 128, device="cuda", dtype=torch.float16, generator=torch.Generator("cuda")
                        .manual_seed(tokens))
        assert quant.experts.runs_sorted(x, quant.top_k) == (tokens >= first_sorted)
        assert quant.experts.runs_grouped(x, quant.top_k) == (tokens < first_sorted)
        assert _rel(quant(x), dense(x)) < 2e-2, tokens
    _assert_graphs_equal_eager(graphs, LLM(str(q_dir), enforce_eager=True, **kw), seed=20)
    ref_model = AutoModelForCausalLM.from_pretrained(d_dir, dtype=torch.float32).eval()
    llm = LLM(str(q_dir), dtype="float32", device="cuda", max_model_len=128, **KV)
    for prompt in _prompts(ref_model.config.vocab_size, (9, 40), seed=8):
        out = llm.generate({"prompt_token_ids": prompt}, GREEDY)[0].outputs[0].token_ids
        assert_greedy_parity(ref_model, prompt, out, reference_greedy(ref_model, prompt, GREEDY.max_tokens))
