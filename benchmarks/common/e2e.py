"""End-to-end engine timing the e2e benchmarks share: random prompts, timed ``LLM.generate`` calls, batch-1
decode rates, event timing of captured graphs and a per-kernel breakdown of a call."""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable

import torch

from common import timing
from revolta_engine import LLM, SamplingParams


def copy_bandwidth() -> float:
    """The roofline's copy rate in bytes/s (``timing.copy_gbs``, best of ten)."""
    return timing.copy_gbs(best=True) * 1e9


def random_prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """``n`` prompts of ``length`` random token ids (clear of the vocabulary's first and last 100)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(100, vocab - 100, (length,), generator=g).tolist() for _ in range(n)]


def timed_outputs(llm: LLM, prompts: list[list[int]], max_tokens: int) -> tuple[float, list]:
    """Seconds for one ``generate`` of ``prompts`` (greedy, exactly ``max_tokens`` each) and its outputs."""
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    torch.cuda.synchronize()
    assert all(len(o.outputs[0].token_ids) == max_tokens for o in outs)
    return time.perf_counter() - t0, outs


def timed_generate(llm: LLM, prompts: list[list[int]], max_tokens: int) -> float:
    """Seconds for one ``generate`` of ``prompts`` (see :func:`timed_outputs`)."""
    return timed_outputs(llm, prompts, max_tokens)[0]


def decode_rates(llm: LLM, prompt: list[int], tokens: int, reps: int = 3) -> dict[str, float]:
    """Batch-1 decode tok/s two ways, each the median of ``reps``, after one untimed generation at the prompt's length:

    - ``per_token``: tokens - 1 over the time from the first output token to the last (the engine's token
      timestamps, ``RequestOutput.metrics``), so the decode steps alone, as vLLM's TPOT;
    - ``difference``: tokens - 1 over (full generation - prefill-only generation). It also counts a request's start
      and finish, but a prefill whose time varies between calls moves it (a MoE prefill that loops over the routed
      experts on the host can make it swing by more than the rate itself), so ``per_token`` is the headline.
    """
    timed_generate(llm, [prompt], 2)  # first-use costs of this prompt length's shapes, else in one rep's prefill
    per_token, difference = [], []
    for _ in range(reps):
        t1 = timed_generate(llm, [prompt], 1)
        t, outs = timed_outputs(llm, [prompt], tokens)
        m = outs[0].metrics
        per_token.append((tokens - 1) / (m.last_token_time - m.first_token_time))
        difference.append((tokens - 1) / (t - t1))
    return {"per_token": statistics.median(per_token), "difference": statistics.median(difference)}


def decode_rate(llm: LLM, prompt: list[int], tokens: int, reps: int = 3) -> float:
    """Decoded tokens/s after the prompt: ``decode_rates``' per-token rate."""
    return decode_rates(llm, prompt, tokens, reps)["per_token"]


event_ms = functools.partial(timing.time_ms, reps=20, warmup=1)


def kernel_breakdown(fn: Callable[[], object], reps: int = 5, top: int = 25) -> list[dict]:
    """GPU time per call of ``fn`` by kernel name (torch profiler), the largest first, after a total row."""
    try:
        from torch.profiler import ProfilerActivity, profile

        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                fn()
            torch.cuda.synchronize()
        rows = []
        for ev in prof.key_averages():
            dev_us = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
            if dev_us:
                rows.append({"kernel": ev.key[:120], "us_per_call": dev_us / reps, "count_per_call": ev.count / reps})
        rows.sort(key=lambda r: -r["us_per_call"])
        total = sum(r["us_per_call"] for r in rows)
        return [{"kernel": "TOTAL (sum of kernel times)", "us_per_call": total,
                 "count_per_call": sum(r["count_per_call"] for r in rows)}] + rows[:top]
    except Exception as exc:  # the breakdown is a diagnosis; keep the measured rates
        return [{"error": repr(exc)}]
