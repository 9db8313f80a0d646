"""GPU engine tests (marker ``gpu``): CUDA graphs, fp16 agreement with the CPU engine, preemption."""

from __future__ import annotations

import pytest
import torch

from revolta_engine import LLM, SamplingParams

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)


def _prompts(n: int, vocab: int, seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [{"prompt_token_ids": torch.randint(3, vocab, (20 + 7 * i,), generator=g).tolist()} for i in range(n)]


def _model_path(tmp_path_factory) -> str:
    """SmolLM2 when its GGUF is installed; else a random Llama with native-kernel shapes (head_dim 64)."""
    from revolta_engine import default_model
    from revolta_engine.errors import DefaultModelMissingError

    try:
        return str(default_model())
    except DefaultModelMissingError:
        from checkpoints import make_tiny_checkpoint

        return str(make_tiny_checkpoint(tmp_path_factory.mktemp("gpu") / "llama", "llama", hidden_size=256,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                        intermediate_size=512, num_hidden_layers=4, max_position_embeddings=2048))


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    return _model_path(tmp_path_factory)


@pytest.fixture(scope="module")
def smol_gpu(model_path) -> LLM:
    return LLM(model_path, dtype="float16", max_model_len=1024, max_num_seqs=16, kv_cache_memory_bytes=2 * 2**30)


def test_graph_replay_equals_eager_for_several_batch_sizes(smol_gpu, model_path):
    eager = LLM(model_path, dtype="float16", max_model_len=1024, max_num_seqs=16,
                kv_cache_memory_bytes=2 * 2**30, enforce_eager=True)
    assert smol_gpu.llm_engine.runner.graph_runner is not None, "graphs were not captured"
    assert eager.llm_engine.runner.graph_runner is None
    vocab = smol_gpu.llm_engine.hf_config.vocab_size
    for n in (1, 3, 8, 13):
        prompts = _prompts(n, vocab, seed=n)
        got = [o.outputs[0].token_ids for o in smol_gpu.generate(prompts, GREEDY)]
        want = [o.outputs[0].token_ids for o in eager.generate(prompts, GREEDY)]
        assert got == want, f"batch of {n}: graph replay differs from eager"


@torch.inference_mode()
def test_fp16_gpu_agrees_with_cpu_float32_teacher_forced(smol_gpu, model_path):
    """Top-1 of every position of a fixed text, GPU fp16 vs CPU fp32, over a few hundred positions."""
    cpu = LLM(model_path, dtype="float32", max_model_len=1024, device="cpu")
    tok = cpu.get_tokenizer()
    text = ("The history of astronomy spans thousands of years. Ancient peoples watched the sky to keep "
            "calendars and to navigate. ") * 8
    ids = tok.encode(text)[:400]

    def top1(llm: LLM) -> torch.Tensor:
        engine = llm.llm_engine
        model, device = engine.model, engine.device
        from revolta_engine.forward_context import AttentionMetadata, ForwardContext, forward_context

        n = len(ids)
        bs = engine.kv.block_size
        blocks = list(range(1, -(-n // bs) + 1))
        i32 = lambda x: torch.tensor(x, dtype=torch.int32, device=device)  # noqa: E731
        meta = AttentionMetadata(torch.arange(n, device=device) + bs, i32([blocks]), i32([n]), i32([0, n]), n, n)
        with forward_context(ForwardContext(meta, engine.runner.kv_caches)):
            hidden = model(torch.tensor(ids, device=device), torch.arange(n, device=device))
        return model.compute_logits(hidden).argmax(-1).cpu()

    agree = (top1(smol_gpu) == top1(cpu)).float().mean().item()
    assert agree >= 0.95, f"only {agree:.1%} of teacher-forced top-1 positions agree"


def test_tiny_kv_cache_preempts_and_keeps_greedy_output(smol_gpu, model_path):
    vocab = smol_gpu.llm_engine.hf_config.vocab_size
    prompts = _prompts(8, vocab, seed=11)
    want = [o.outputs[0].token_ids for o in smol_gpu.generate(prompts, GREEDY)]
    small = LLM(model_path, dtype="float16", max_model_len=1024, max_num_seqs=16, num_gpu_blocks_override=12)
    got = [o.outputs[0].token_ids for o in small.generate(prompts, GREEDY)]
    assert small.llm_engine.get_stats().num_preemptions > 0
    assert got == want


def test_async_scheduling_matches_the_synchronous_loop(smol_gpu, model_path):
    assert smol_gpu.llm_engine.async_scheduling, "async scheduling is the default on CUDA"
    sync = LLM(model_path, dtype="float16", max_model_len=1024, max_num_seqs=16, kv_cache_memory_bytes=2 * 2**30,
               async_scheduling=False)
    vocab = smol_gpu.llm_engine.hf_config.vocab_size
    prompts = _prompts(12, vocab, seed=5)
    params = [SamplingParams(temperature=0.0, max_tokens=10 + i, ignore_eos=True) for i in range(12)]
    params[3] = SamplingParams(temperature=0.9, top_p=0.8, seed=11, max_tokens=16, logprobs=1, ignore_eos=True)
    got, want = smol_gpu.generate(prompts, params), sync.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in want]


def test_graphs_of_each_context_width_equal_eager(model_path):
    """Short and long contexts replay graphs of different block-table widths (split plans)."""
    kw = {"dtype": "float16", "max_model_len": 2048, "max_num_seqs": 8, "kv_cache_memory_bytes": 2 * 2**30}
    graphed, eager = LLM(model_path, **kw), LLM(model_path, enforce_eager=True, **kw)
    assert graphed.llm_engine.runner.graph_runner.widths == [64, 128]
    vocab = graphed.llm_engine.hf_config.vocab_size
    g = torch.Generator().manual_seed(21)
    long = [{"prompt_token_ids": torch.randint(3, vocab, (1100,), generator=g).tolist()}]
    for prompts in (_prompts(3, vocab, seed=22), long + _prompts(2, vocab, seed=23)):
        got = [o.outputs[0].token_ids for o in graphed.generate(prompts, GREEDY)]
        want = [o.outputs[0].token_ids for o in eager.generate(prompts, GREEDY)]
        assert got == want
