"""``revolta bench latency``: how long one batch takes end to end (vLLM's ``bench latency``): a batch of random
prompts generated to exactly ``--output-len`` tokens, warm-up iterations first, then the average and percentiles."""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from revolta_cli.bench.dataset import add_token_range_flag, random_requests
from revolta_cli.bench.report import percentile, write_result
from revolta_cli.engine_flags import add_engine_flags, llm_from

PERCENTILES = (10, 25, 50, 75, 90, 99)


def add_parser(subparsers: Any) -> None:
    """Register ``bench latency``."""
    p = subparsers.add_parser("latency", help="end-to-end latency of one batch (no server)")
    add_engine_flags(p)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--num-iters-warmup", type=int, default=2)
    p.add_argument("--num-iters", type=int, default=10)
    add_token_range_flag(p)
    p.add_argument("--output-json", default=None, help="write the result JSON here")
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    """Load the model, run the warm-up batches, then time ``--num-iters`` batches."""
    from revolta_engine import SamplingParams

    if min(ns.input_len, ns.output_len, ns.batch_size, ns.num_iters) < 1 or ns.num_iters_warmup < 0:
        raise SystemExit("revolta bench latency: lengths, batch size and iterations must be positive")
    requests = random_requests(ns.batch_size, ns.input_len, ns.output_len, ns.seed or 0,
                               token_range=tuple(ns.random_token_range))
    llm = llm_from(ns)
    params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=ns.output_len, ignore_eos=True)
    prompts = [{"prompt_token_ids": r.prompt} for r in requests]

    def one_batch() -> float:
        start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        elapsed = time.perf_counter() - start
        assert all(len(o.outputs[0].token_ids) == ns.output_len for o in outputs)
        return elapsed

    for _ in range(ns.num_iters_warmup):
        one_batch()
    latencies = [one_batch() for _ in range(ns.num_iters)]
    result = {"avg_latency": statistics.fmean(latencies), "latencies": latencies,
              "percentiles": {str(q): percentile(latencies, q) for q in PERCENTILES},
              "batch_size": ns.batch_size, "input_len": ns.input_len, "output_len": ns.output_len}
    print(f"Avg latency: {result['avg_latency']:.4f} seconds ({ns.batch_size} prompts of {ns.input_len} tokens, "
          f"{ns.output_len} output tokens each, {ns.num_iters} iterations)")
    for q in PERCENTILES:
        print(f"{q}% percentile latency: {result['percentiles'][str(q)]:.4f} seconds")
    write_result(ns.output_json, result)
    llm.shutdown()
    return 0
