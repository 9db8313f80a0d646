"""Where one batch-1 decode step's GPU time goes: each kernel's share of the critical path of a graph replay.

Kernel times summed from a profiler overstate a step run with programmatic dependent launch (PDL), where a
kernel starts before the previous one ends. Here the step's kernels are sorted by end time and each one is
charged the time from the previous kernel's end to its own (the first one: its whole duration), so the
charges add up to the replay's span and show which kernels lengthen the step, and by how much.

Usage (on a GPU machine, dummy weights):
    python benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq --out bench_out/timeline.json
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch
from common.e2e import decode_rate, event_ms

from revolta_engine import LLM, SamplingParams


def kernel_events(fn, reps: int) -> list[list[tuple[str, float, float]]]:
    """(name, start_us, end_us) of every GPU activity of each of ``reps`` calls of ``fn``."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
            torch.cuda.synchronize()
            time.sleep(0.002)  # a gap that separates the calls in the trace
    events = []
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA and ev.time_range.end > ev.time_range.start:
            events.append((ev.name, float(ev.time_range.start), float(ev.time_range.end)))
    events.sort(key=lambda e: e[1])
    calls: list[list[tuple[str, float, float]]] = []
    for e in events:
        if not calls or e[1] - max(x[2] for x in calls[-1]) > 1000.0:
            calls.append([])
        calls[-1].append(e)
    return calls


def path_times(call: list[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """(name, busy_us, path_us) of every kernel in end order: path = its end minus the previous kernel's end (a gap
    before it is its launch latency), the first kernel's path its duration."""
    by_end = sorted(call, key=lambda e: e[2])
    return [(name, end - start, end - (start if i == 0 else by_end[i - 1][2]))
            for i, (name, start, end) in enumerate(by_end)]


def critical_path(path: list[tuple[str, float, float]]) -> dict[str, dict[str, float]]:
    """Per kernel name of ``path_times``: the span it adds, its summed duration, its count."""
    rows: dict[str, dict[str, float]] = defaultdict(lambda: {"path_us": 0.0, "busy_us": 0.0, "count": 0.0})
    for name, busy, on_path in path:
        row = rows[name[:110]]
        row["path_us"] += on_path
        row["busy_us"] += busy
        row["count"] += 1
    return dict(rows)


def build_llm(config: str, prompt_len: int) -> tuple[LLM, list[int]]:
    """The engine on dummy weights with one random prompt of ``prompt_len`` tokens, its decode graphs captured."""
    llm = LLM(config, load_format="dummy", dtype="float16", max_model_len=2048, max_num_seqs=4,
              max_num_batched_tokens=2048, kv_cache_memory_bytes=4 * 2**30, enable_prefix_caching=False)
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, llm.llm_engine.hf_config.vocab_size - 100, (prompt_len,), generator=g).tolist()
    llm.generate([{"prompt_token_ids": prompt}], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))
    return llm, prompt


def captured_step(llm: LLM):
    """The replay of the last captured decode step (the batch-1 bucket after a batch-1 generate)."""
    graphs = llm.llm_engine.runner.graph_runner
    assert graphs is not None, "CUDA graphs are off; the timeline needs the captured decode step"
    return graphs.graphs[graphs.last_bucket].replay


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", default="benchmarks/configs/llama-3.1-8b-awq")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("bench_out/decode_timeline.json"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    llm, prompt = build_llm(args.config, args.prompt_len)
    engine = llm.llm_engine
    model = engine.model
    rate = decode_rate(llm, prompt, args.output_len)
    graphs = engine.runner.graph_runner
    replay = captured_step(llm)
    last = graphs.last_bucket
    forward_ms = event_ms(replay)
    hidden = graphs.outputs[last][:1]
    with torch.inference_mode():
        head_ms = event_ms(lambda: model.compute_logits(hidden))
    calls = kernel_events(replay, args.reps)
    spans = [max(e[2] for e in c) - min(e[1] for e in c) for c in calls]
    median_call = calls[sorted(range(len(calls)), key=lambda i: spans[i])[len(calls) // 2]]
    path = path_times(median_call)
    rows = critical_path(path)
    table = sorted(({"kernel": k, **v} for k, v in rows.items()), key=lambda r: -r["path_us"])
    t0 = min(e[1] for e in median_call)
    sequence = [{"kernel": n[:80], "start_us": round(s - t0, 2), "dur_us": round(e - s, 2)}
                for n, s, e in sorted(median_call, key=lambda e: e[1])[:40]]
    path_sequence = [{"kernel": n[:80], "path_us": round(p, 2)} for n, _busy, p in path]  # per-layer comparisons
    result = {
        "config": args.config, "gpu": torch.cuda.get_device_name(), "batch1_decode_tok_s": rate,
        "step_ms": 1e3 / rate, "graph_forward_ms": forward_ms, "lm_head_ms": head_ms,
        "host_gap_ms": 1e3 / rate - forward_ms - head_ms,
        "profiled_span_us": statistics.median(spans), "kernels_per_step": len(median_call),
        "critical_path": table, "first_kernels": sequence,
        "path_sequence": path_sequence,
    }
    print(f"{args.config}: {rate:.1f} tok/s = {1e3 / rate:.3f} ms/step; graph forward {forward_ms:.3f} ms, "
          f"LM head {head_ms:.3f} ms, profiled span {statistics.median(spans):.1f} us, {len(median_call)} kernels")
    for r in table[:14]:
        print(f"  {r['path_us']:8.1f} us on the path ({r['busy_us']:8.1f} busy) x{r['count']:4.0f}  {r['kernel'][:80]}")
    for s in sequence[:24]:
        print(f"    +{s['start_us']:8.2f} {s['dur_us']:6.2f} us  {s['kernel']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
