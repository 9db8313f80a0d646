"""GPU (marker ``gpu``): speculative decoding with asynchronous scheduling, and in fp16 with CUDA graphs, changes
no output. Tiny random models (a dense Llama, a hybrid Qwen3.5 with an MTP head, an AWQ-quantized Llama) draft
with the benchmarks' oracle proposer at p = 0.7 (drafts kept for runs of every length) and the hybrid also with
its MTP head; n-gram drafts need a model that copies, so they run on SmolLM2 copying a passage.

- float32 (no graphs: they need fp16/bf16): greedy output with speculation equals greedy output without, token
  for token, and the oracle's drafts are kept exactly as planned.
- fp16 (graphs): the verification pass (several query tokens per sequence) and a decode step round differently,
  so the two outputs may part only where the float32 reference (transformers; for SmolLM2 the float32 engine)
  has a tie at their first difference.
- seeded random sampling (SmolLM2 copying, n-gram and oracle drafts): the sampled tokens' marginals with and
  without speculation are the same distribution (the CPU test's two-sample chi-square).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from parity import TIE_GAP
from spec_helpers import assert_same_marginals, repetitive_prompts

import revolta_kernels
from revolta_engine import LLM, SamplingParams

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not revolta_kernels.native_available(), reason=revolta_kernels.native_status()),
]

GREEDY = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
ENGINE = dict(kv_cache_memory_bytes=256 << 20, max_model_len=512, max_num_seqs=8, async_scheduling=True)
K = 4
CASES = [("dense", "oracle"), ("hybrid", "oracle"), ("hybrid", "mtp"), ("awq", "oracle")]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Per model: its checkpoint and the one transformers loads as its float32 reference (the AWQ model's
    dequantized twin). Head sizes the native kernels take (attention and Gated DeltaNet heads of 64)."""
    from checkpoints import make_tiny_checkpoint
    from hybrid_checkpoints import make_family_checkpoint
    from mtp_head import add_mtp_head

    from revolta_engine.quantize import quantize_checkpoint

    root = tmp_path_factory.mktemp("spec-gpu")
    dense = make_tiny_checkpoint(root / "dense", "llama", hidden_size=256, num_attention_heads=4,
                                 num_key_value_heads=2, head_dim=64, intermediate_size=512, num_hidden_layers=4)
    hybrid = make_family_checkpoint(root / "hybrid", "qwen3_5", hidden_size=128, intermediate_size=256,
                                    head_dim=64, linear_key_head_dim=64, linear_value_head_dim=64)
    add_mtp_head(hybrid, "qwen3_5")
    awq = quantize_checkpoint(dense, root / "awq", "awq", 4, 64, dequantized_dst=root / "awq-dequantized")
    return {"dense": (dense, dense), "hybrid": (hybrid, hybrid), "awq": (awq, root / "awq-dequantized")}


@pytest.fixture(scope="module")
def references(checkpoints):
    """The float32 transformers model of each checkpoint, loaded once."""
    from transformers import AutoModelForCausalLM

    cache: dict[str, torch.nn.Module] = {}

    def get(model: str) -> torch.nn.Module:
        if model not in cache:
            cache[model] = AutoModelForCausalLM.from_pretrained(checkpoints[model][1], dtype=torch.float32).eval()
        return cache[model]

    return get


@pytest.fixture(scope="module")
def plain_outputs(checkpoints):
    """Greedy output without speculation, per (model, dtype): the tokens of every prompt."""
    cache: dict[tuple[str, str], list[list[int]]] = {}

    def get(model: str, dtype: str) -> list[list[int]]:
        if (model, dtype) not in cache:
            llm = LLM(str(checkpoints[model][0]), dtype=dtype, **ENGINE)
            _check_engine(llm, dtype)
            cache[model, dtype] = greedy(llm)
            llm.llm_engine.shutdown()
        return cache[model, dtype]

    return get


def prompts() -> list[dict]:
    return repetitive_prompts(8, motif=(5, 4), repeats=10, length=(30, 7))


def greedy(llm: LLM) -> list[list[int]]:
    return [list(o.outputs[0].token_ids) for o in llm.generate(prompts(), GREEDY)]


def _check_engine(llm: LLM, dtype: str) -> None:
    engine = llm.llm_engine
    assert engine.async_scheduling, "asynchronous scheduling is on"
    assert (engine.runner.graph_runner is not None) == (dtype != "float32"), "graphs are captured in fp16 only"


def speculative_engine(path: Path, dtype: str, proposer: str, plain: list[list[int]]) -> tuple[LLM, object]:
    """The engine with ``proposer``'s drafts (the oracle replays ``plain``), and the oracle (None otherwise)."""
    from common.oracle import OracleProposer, install_oracle

    method = "mtp" if proposer == "mtp" else "ngram"
    llm = LLM(str(path), dtype=dtype, speculative_config={"method": method, "num_speculative_tokens": K}, **ENGINE)
    _check_engine(llm, dtype)
    if proposer != "oracle":
        return llm, None
    records = {tuple(p["prompt_token_ids"]): t for p, t in zip(prompts(), plain, strict=True)}
    oracle = OracleProposer(records, 0.7, int(llm.llm_engine.hf_config.vocab_size), seed=5)
    install_oracle(llm, oracle)
    return llm, oracle


def _check_drafting(llm: LLM, proposer: str, oracle, exact: bool) -> None:
    """Drafts were proposed; the oracle's were kept for runs of every length (exactly as planned while the target
    stays on its recorded output, which float32 guarantees)."""
    stats = llm.llm_engine.get_stats()
    assert stats.spec_decode_num_draft_tokens > 0
    if proposer == "oracle":
        assert 0 < stats.spec_decode_num_accepted_tokens < stats.spec_decode_num_draft_tokens
        per_pos = stats.spec_decode_num_accepted_tokens_per_pos
        assert len(per_pos) == K and per_pos[-1] > 0
        if exact:
            assert oracle.off_record == 0 and stats.spec_decode_num_accepted_tokens == oracle.planned_accepted
    if proposer == "mtp":
        assert llm.llm_engine.draft.missed == 0


@pytest.mark.parametrize(("model", "proposer"), CASES)
def test_float32_greedy_output_is_identical_with_speculation(checkpoints, plain_outputs, model, proposer):
    want = plain_outputs(model, "float32")
    llm, oracle = speculative_engine(checkpoints[model][0], "float32", proposer, want)
    assert greedy(llm) == want
    _check_drafting(llm, proposer, oracle, exact=True)


@pytest.mark.parametrize(("model", "proposer"), CASES)
def test_fp16_graphed_greedy_output_differs_only_at_ties(checkpoints, references, plain_outputs, model, proposer):
    want = plain_outputs(model, "float16")
    llm, oracle = speculative_engine(checkpoints[model][0], "float16", proposer, want)
    got = greedy(llm)
    _check_drafting(llm, proposer, oracle, exact=False)
    ref = references(model)
    for p, a, b in zip(prompts(), got, want, strict=True):
        assert_same_up_to_a_tie(ref, p["prompt_token_ids"], a, b)


@torch.inference_mode()
def assert_same_up_to_a_tie(ref: torch.nn.Module | LLM, prompt: list[int], a: list[int], b: list[int]) -> None:
    """``a`` equals ``b``, or at their first difference the float32 reference's top-1/top-2 logit gap after the
    tokens they share is a tie (below ``parity.TIE_GAP``). ``ref``: a transformers model, or a float32 engine
    (the gap of its two top logprobs)."""
    assert len(a) == len(b)
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)
    if first is None:
        return
    if isinstance(ref, LLM):
        params = SamplingParams(temperature=0.0, max_tokens=1, logprobs=2)
        top = ref.generate({"prompt_token_ids": prompt + a[:first]}, params)[0].outputs[0].logprobs[0]
        best = sorted((lp.logprob for lp in top.values()), reverse=True)
        gap = best[0] - best[1]
    else:
        top2 = torch.topk(ref(torch.tensor([prompt + a[:first]])).logits[0, -1].double(), 2).values
        gap = float(top2[0] - top2[1])
    assert gap < TIE_GAP, (f"outputs with and without speculation differ at token {first} ({a[first]} vs "
                           f"{b[first]}) where the float32 reference's top-2 gap is {gap:.4f}: not a tie")


PASSAGE = ("The quick brown fox jumps over the lazy dog. Paged attention stores keys and values in fixed-size "
           "blocks, and prefix caching reuses blocks whose tokens hash to the same value. ")
COPY = [{"role": "user", "content": "Copy this text exactly, word for word:\n\n" + PASSAGE * 2}]


@pytest.fixture(scope="module")
def smollm2() -> str:
    from revolta_engine import default_model
    from revolta_engine.errors import DefaultModelMissingError

    try:
        return str(default_model())
    except DefaultModelMissingError as exc:
        pytest.skip(str(exc))


def test_smollm2_copies_with_ngram_drafts_as_without(smollm2):
    """n-gram drafts on a copying task (most accepted): fp16 graphed output as without drafts up to a tie; float32
    output identical."""
    engine = dict(ENGINE, max_model_len=1024)
    params = SamplingParams(temperature=0.0, max_tokens=64)
    ngram = {"method": "ngram", "num_speculative_tokens": K}
    ref = LLM(smollm2, dtype="float32", **engine)
    for dtype in ("float32", "float16"):
        plain = ref if dtype == "float32" else LLM(smollm2, dtype=dtype, **engine)
        spec = LLM(smollm2, dtype=dtype, speculative_config=ngram, **engine)
        for llm in (plain, spec):
            _check_engine(llm, dtype)
        want = plain.chat(COPY, params)[0]
        got = spec.chat(COPY, params)[0].outputs[0].token_ids
        stats = spec.llm_engine.get_stats()
        assert stats.spec_decode_num_accepted_tokens >= 0.5 * stats.spec_decode_num_draft_tokens > 0
        if dtype == "float32":
            assert got == want.outputs[0].token_ids
        else:
            assert_same_up_to_a_tie(ref, want.prompt_token_ids, list(got), list(want.outputs[0].token_ids))


@pytest.mark.parametrize("proposer", ["ngram", "oracle"])
def test_seeded_random_sampling_keeps_its_distribution(smollm2, proposer):
    """The 2nd, 3rd and 4th sampled tokens of 400 sequences, with and without drafts (fp16, graphs, async), have
    the same marginal distributions."""
    from common.oracle import OracleProposer, install_oracle

    engine = dict(ENGINE, kv_cache_memory_bytes=1 << 30, max_num_seqs=64)
    plain = LLM(smollm2, dtype="float16", **engine)
    _check_engine(plain, "float16")
    record = plain.chat(COPY, SamplingParams(temperature=0.0, max_tokens=4))[0]
    spec = LLM(smollm2, dtype="float16", speculative_config={"method": "ngram", "num_speculative_tokens": K},
               **engine)
    _check_engine(spec, "float16")
    if proposer == "oracle":
        records = {tuple(record.prompt_token_ids): list(record.outputs[0].token_ids)}
        install_oracle(spec, OracleProposer(records, 0.7, int(spec.llm_engine.hf_config.vocab_size), seed=3))
    params = SamplingParams(temperature=1.3, max_tokens=4, n=400, seed=1234)
    a_out = [c.token_ids for c in plain.chat(COPY, params)[0].outputs]
    b_out = [c.token_ids for c in spec.chat(COPY, params)[0].outputs]
    assert spec.llm_engine.get_stats().spec_decode_num_accepted_tokens > 0
    assert_same_marginals(a_out, b_out, (1, 2, 3))
