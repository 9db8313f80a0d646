"""``revolta bench throughput``: offline ``LLM.generate`` throughput on the same random prompts as bench serve."""

from __future__ import annotations

import argparse
import time
from typing import Any

from revolta_cli.bench.dataset import add_random_dataset_flags, requests_from_flags
from revolta_cli.bench.report import write_result
from revolta_cli.engine_flags import add_engine_flags, llm_from


def add_parser(subparsers: Any) -> None:
    """Register ``bench throughput``."""
    p = subparsers.add_parser("throughput", help="offline throughput of LLM.generate (no server)")
    add_engine_flags(p)
    add_random_dataset_flags(p)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--output-json", default=None, help="write the result JSON here")
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    """Load the model, generate every prompt (ignore_eos, exact output lengths) and report tokens/s."""
    from revolta_engine import SamplingParams

    requests = requests_from_flags(ns, ns.seed if ns.seed is not None else 0)
    llm = llm_from(ns)
    params = [SamplingParams(temperature=ns.temperature, max_tokens=r.output_len, ignore_eos=True)
              for r in requests]
    start = time.perf_counter()
    outputs = llm.generate([r.prompt for r in requests], params)
    duration = time.perf_counter() - start
    total_out = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    total_in = sum(len(o.prompt_token_ids) for o in outputs)
    result = {"num_prompts": len(requests), "duration": duration, "total_input_tokens": total_in,
              "total_output_tokens": total_out, "request_throughput": len(requests) / duration,
              "output_throughput": total_out / duration, "total_token_throughput": (total_in + total_out) / duration}
    print(f"Throughput: {result['request_throughput']:.2f} requests/s, "
          f"{result['total_token_throughput']:.2f} total tokens/s, {result['output_throughput']:.2f} output tokens/s "
          f"({len(requests)} prompts, {total_in} input + {total_out} output tokens in {duration:.1f} s)")
    write_result(ns.output_json, result)
    return 0
