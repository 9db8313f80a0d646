"""Where a decode step's time goes on the GPU: host phases of one engine step, device kernels, GEMV rates.

Runs on one engine (dummy weights) and writes, under --out-dir:
  host_phases.json   mean host time per engine step by phase (batch 1 and batch N), graph replay GPU time
  kernels_*.txt      torch.profiler tables (top CUDA kernels, top CPU ops) for batch-1 decode, batch-N
                     decode and one long prefill
  gemv.json          achieved bandwidth of every projection of one layer (and the LM head) at 1 and N rows
  summary.txt        the short version of all of it
then the usual end-to-end numbers (gpu_e2e.measure) to --out.

Usage (on a GPU machine): python benchmarks/gpu_profile.py --out-dir $OUT/profile --out $OUT/e2e.json
"""

from __future__ import annotations

import json
import time
import traceback
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
from common.e2e import copy_bandwidth, random_prompts, timed_generate
from common.timing import replay_us
from gpu_e2e import build_parser, make_llm, measure
from torch.profiler import ProfilerActivity, profile

from revolta_engine import SamplingParams
from revolta_engine.engine import inflight


class PhaseTimes:
    """Wraps methods of live objects to add up their wall time per label."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._undo: list = []

    def wrap(self, obj, name: str, label: str) -> None:
        fn = getattr(obj, name)

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.total[label] += time.perf_counter() - t0
                self.calls[label] += 1

        setattr(obj, name, timed)
        self._undo.append((obj, name, fn))

    def restore(self) -> None:
        for obj, name, fn in reversed(self._undo):
            setattr(obj, name, fn)
        self._undo.clear()

    def per_step_us(self, steps: int) -> dict[str, float]:
        return {k: round(v / steps * 1e6, 1) for k, v in sorted(self.total.items(), key=lambda kv: -kv[1])}


def instrument(engine) -> PhaseTimes:
    t = PhaseTimes()
    t.wrap(engine, "step", "step (total)")
    t.wrap(engine, "_launch", "launch: prepare+forward+sample (host)")
    t.wrap(engine, "_finish", "finish: wait + append/stop/output state")
    t.wrap(engine.scheduler, "schedule", "schedule")
    t.wrap(engine.runner, "prepare", "prepare: pack + one H2D copy")
    if engine.runner.graph_runner is not None:
        t.wrap(engine.runner.graph_runner, "run", "graph replay launch")
    t.wrap(engine.sampler, "sample", "sampler (launch)")
    t.wrap(inflight.PendingTokens, "wait", "wait for device (sampled ids)")
    return t


def run_steps(engine, prompts: list[list[int]], max_tokens: int, prof_steps: int = 0, prof=None) -> int:
    """Add the prompts, step until every request has its first token, then (optionally) profile
    ``prof_steps`` steps, then finish. Returns the number of decode steps taken after the prefill."""
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    engine.stats.num_generation_tokens = 0
    for i, p in enumerate(prompts):
        engine.add_request(f"prof-{time.monotonic_ns()}-{i}", {"prompt_token_ids": p}, params)
    while engine.stats.num_generation_tokens < len(prompts) * 2 and engine.has_unfinished_requests():
        engine.step()
    steps = 0
    if prof is not None:
        prof.start()
    while engine.has_unfinished_requests():
        engine.step()
        steps += 1
        if prof is not None and steps == prof_steps:
            torch.cuda.synchronize()
            prof.stop()
            prof = None
    if prof is not None:
        prof.stop()
    torch.cuda.synchronize()
    return steps


def host_phases(llm, prompts, max_tokens: int) -> dict:
    engine = llm.llm_engine
    engine.stats.num_generation_tokens = 0
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    for i, p in enumerate(prompts):
        engine.add_request(f"phase-{time.monotonic_ns()}-{i}", {"prompt_token_ids": p}, params)
    while engine.stats.num_generation_tokens < len(prompts) * 2:
        engine.step()
    torch.cuda.synchronize()
    timer = instrument(engine)
    steps, t0 = 0, time.perf_counter()
    while engine.has_unfinished_requests():
        engine.step()
        steps += 1
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    timer.restore()
    return {"batch": len(prompts), "decode_steps": steps, "wall_ms_per_step": wall / steps * 1e3,
            "host_us_per_step": timer.per_step_us(steps)}


def graph_gpu_ms(engine, bs: int, ctx: int, reps: int = 30) -> float | None:
    """Device time of one replay of the bucket-``bs`` graph with every row at context ``ctx``.

    Call with the engine idle: it writes synthetic inputs (distinct valid blocks, no KV writes) into the
    graph's input buffer.
    """
    graphs = engine.runner.graph_runner
    if graphs is None or bs not in graphs.buckets:
        return None
    dev = engine.device
    nb = -(-ctx // engine.kv.block_size)
    width = graphs.width(nb)
    if width is None:
        return None
    v = graphs.buffers.views(graphs.layout(bs, width))
    v["input_ids"].copy_(torch.randint(100, 1000, (bs,), device=dev))
    v["positions"].fill_(ctx - 1)
    v["slot_mapping"].fill_(-1)
    v["context_lens"].fill_(ctx)
    v["query_start_loc"].copy_(torch.arange(bs + 1, dtype=torch.int32, device=dev))
    v["block_tables"][:, :nb].copy_(torch.arange(1, 1 + bs * nb, dtype=torch.int32, device=dev).view(bs, nb))
    g = graphs.graphs[bs, width, 1]
    return replay_us(g, reps) / 1e3


def gemv_rates(model, rows: list[int]) -> list[dict]:
    """Achieved bandwidth of F.linear on the model's own weights (layer 0 and the LM head), graphed."""
    layer = model.model.layers[0]
    weights = {"qkv_proj": layer.self_attn.qkv_proj.weight, "o_proj": layer.self_attn.o_proj.weight,
               "gate_up_proj": layer.mlp.gate_up_proj.weight, "down_proj": layer.mlp.down_proj.weight,
               "lm_head": model.lm_head if not model.tie_word_embeddings else model.model.embed_tokens.weight}
    out = []
    for m in rows:
        for name, w in weights.items():
            x = torch.randn(m, w.shape[1], dtype=w.dtype, device=w.device)
            reps = 20
            g = torch.cuda.CUDAGraph()
            F.linear(x, w)
            torch.cuda.synchronize()
            with torch.cuda.graph(g):
                for _ in range(reps):
                    F.linear(x, w)
            g.replay()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(5):
                g.replay()
            end.record()
            end.synchronize()
            us = start.elapsed_time(end) / (5 * reps) * 1e3
            nbytes = w.numel() * w.element_size()
            out.append({"rows": m, "name": name, "shape": list(w.shape), "us": round(us, 2),
                        "GBps": round(nbytes / us / 1e3, 1)})
    return out


def kernel_table(prof, path: Path, steps: int) -> str:
    ka = prof.key_averages()
    text = [f"# {steps} steps profiled", ka.table(sort_by="cuda_time_total", row_limit=30), "",
            ka.table(sort_by="self_cpu_time_total", row_limit=20)]
    path.write_text("\n".join(text))
    return ka.table(sort_by="cuda_time_total", row_limit=12)


def main() -> None:
    ap = build_parser(__doc__)
    ap.add_argument("--out-dir", type=Path, default=Path("bench_out/profile"), help="where the profile files go")
    args = ap.parse_args()
    out_dir = args.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    summary: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        summary.append(line)
        (out_dir / "summary.txt").write_text("\n".join(summary))

    def section(name: str, fn) -> None:
        try:
            fn()
        except Exception:  # one failed section must not cost the others (device time is scarce)
            say(f"section {name} failed:\n{traceback.format_exc()}")

    bw = copy_bandwidth()
    llm, log = make_llm(args)
    engine = llm.llm_engine
    vocab = int(engine.hf_config.vocab_size)

    def e2e() -> None:
        result = measure(llm, args, log, bw)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
        say(json.dumps({k: v for k, v in result.items() if k != "memory_log"}, indent=1))

    section("e2e", e2e)
    phases: dict = {"copy_bandwidth_GBps": bw / 1e9}
    p1 = random_prompts(1, args.input_len, vocab, 1)
    pn = random_prompts(args.concurrency, args.input_len, vocab, 2)

    def host() -> None:
        for name, prompts in (("batch1", p1), (f"batch{args.concurrency}", pn)):
            ph = phases[name] = host_phases(llm, prompts, 96)
            say(f"{name}: wall {ph['wall_ms_per_step']:.3f} ms/step; host per step (us): "
                f"{json.dumps(ph['host_us_per_step'])}")
        engine.async_scheduling = False
        ph = phases["batch1_sync"] = host_phases(llm, p1, 96)
        engine.async_scheduling = True
        say(f"batch1 synchronous loop: wall {ph['wall_ms_per_step']:.3f} ms/step; "
            f"host (us): {json.dumps(ph['host_us_per_step'])}")
        (out_dir / "host_phases.json").write_text(json.dumps(phases, indent=2))

    section("host phases", host)
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]

    def kernels() -> None:
        for name, prompts, n in (("decode_batch1", p1, 12), (f"decode_batch{args.concurrency}", pn, 8)):
            prof = profile(activities=acts)
            run_steps(engine, prompts, 40, n, prof)
            say(f"== {name}\n" + kernel_table(prof, out_dir / f"kernels_{name}.txt", n))
        pp = random_prompts(1, args.prefill_len, vocab, 3)
        timed_generate(llm, pp, 1)
        with profile(activities=acts) as prof:
            timed_generate(llm, pp, 1)
        say(f"== prefill{args.prefill_len}\n" + kernel_table(prof, out_dir / "kernels_prefill.txt", 1))

    section("kernel tables", kernels)

    def gemv() -> None:
        rates = gemv_rates(engine.model, [1, args.concurrency])
        default = torch.backends.cuda.preferred_blas_library()
        try:
            torch.backends.cuda.preferred_blas_library("cublaslt")
            rates += [{**r, "name": r["name"] + "/lt"} for r in gemv_rates(engine.model, [1])]
        finally:
            torch.backends.cuda.preferred_blas_library(default)
        (out_dir / "gemv.json").write_text(json.dumps(rates, indent=2))
        for g in rates:
            say(f"linear rows={g['rows']:<3} {g['name']:<13} {g['shape']}: {g['us']:8.1f} us {g['GBps']:7.0f} GB/s")

    section("gemv", gemv)

    def replay() -> None:
        ctx = args.input_len + args.output_len // 2
        for bs in (1, args.concurrency):
            say(f"graph replay alone, batch {bs} at context {ctx}: {graph_gpu_ms(engine, bs, ctx):.3f} ms")

    section("graph replay", replay)


if __name__ == "__main__":
    main()
