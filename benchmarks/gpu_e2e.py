"""End-to-end GPU speed with dummy weights: batch-1 decode vs roofline, 64-way throughput, 8K prefill, KV capacity.

Usage (on a GPU machine):
    python benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b --out $OUT/gpu_e2e.json
    python benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq --decode-only \
        --baseline $OUT/gpu_e2e.json --out $OUT/gpu_e2e_awq.json   # AWQ g128 vs the fp16 run above

The roofline is copy bandwidth over the weight bytes: ``roofline_tok_s`` counts every parameter,
``roofline_read_tok_s`` leaves out the input embedding table (a decode step reads one row of it).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from pathlib import Path

import torch
from common.e2e import copy_bandwidth, decode_rates, random_prompts, timed_generate

import revolta_kernels
from revolta_engine import LLM


class _CapacityLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.kv_tokens: int | None = None
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        self.lines.append(msg)
        m = re.search(r"= (\d+) tokens", msg)
        if msg.startswith("KV cache:") and m:
            self.kv_tokens = int(m.group(1))


def build_parser(description: str | None = __doc__) -> argparse.ArgumentParser:
    """The engine and workload options (gpu_profile.py adds its own to the same parser)."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="benchmarks/configs/llama-3.1-8b")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--prefill-len", type=int, default=8192)
    ap.add_argument("--max-num-batched-tokens", type=int, default=16384,
                    help="the engine's token budget per step (16384: vLLM's offline default on GPUs of 70+ GiB)")
    ap.add_argument("--enforce-eager", action="store_true")
    ap.add_argument("--no-async-scheduling", action="store_true")
    ap.add_argument("--decode-only", action="store_true", help="skip the concurrent and long-prefill runs")
    ap.add_argument("--activation-quant", choices=("none", "int8"), default="none",
                    help="int8: the quantized decode projections round their activations to int8 (AWQ/GPTQ only)")
    ap.add_argument("--baseline", type=Path, help="an earlier result (e.g. fp16) to report the speed-up over")
    ap.add_argument("--out", type=Path, default=Path("bench_out/gpu_e2e.json"))
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of this benchmark."""
    return build_parser().parse_args(argv)


def make_llm(args: argparse.Namespace) -> tuple[LLM, _CapacityLog]:
    """The engine under test (dummy weights), with a log handler that catches the KV capacity line."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    log = _CapacityLog()
    logging.getLogger("revolta_engine").addHandler(log)
    llm = LLM(args.config, load_format="dummy", dtype=args.dtype, max_model_len=args.prefill_len + 64,
              max_num_seqs=args.concurrency, max_num_batched_tokens=max(args.max_num_batched_tokens, args.prefill_len),
              enforce_eager=args.enforce_eager, enable_prefix_caching=False,
              async_scheduling=not args.no_async_scheduling, activation_quant=args.activation_quant)
    return llm, log


def measure(llm: LLM, args: argparse.Namespace, log: _CapacityLog, bw: float) -> dict:
    """Batch-1 decode, concurrent throughput and long-prompt prefill on ``llm``."""
    engine = llm.llm_engine
    weight_bytes = sum(p.numel() * p.element_size() for p in engine.model.parameters())
    embed_bytes = sum(p.numel() * p.element_size() for n, p in engine.model.named_parameters()
                      if n.endswith("embed_tokens.weight"))
    vocab = int(engine.hf_config.vocab_size)
    spec_bytes = engine.runner.kv_caches[0].key.element_size()

    timed_generate(llm, random_prompts(2, 64, vocab, 0), 8)  # warm-up
    # Median of three reps (decode_rates): a single (prefill-only, full) pair lets a first-use cost or a host pause
    # in either timing move the difference-based rate by several percent.
    rates = decode_rates(llm, random_prompts(1, args.input_len, vocab, 1)[0], args.output_len)
    decode_tok_s = rates["per_token"]
    roofline = bw / weight_bytes

    conc_tok_s = prefill_tok_s = None
    if not getattr(args, "decode_only", False):
        pc = random_prompts(args.concurrency, args.input_len, vocab, 2)
        t_conc = timed_generate(llm, pc, args.output_len)
        conc_tok_s = args.concurrency * args.output_len / t_conc

        pp = random_prompts(1, args.prefill_len, vocab, 3)
        timed_generate(llm, pp, 1)
        t_pp = timed_generate(llm, pp, 1)
        prefill_tok_s = args.prefill_len / t_pp

    result = {
        "config": args.config, "dtype": args.dtype, "enforce_eager": args.enforce_eager,
        "activation_quant": getattr(args, "activation_quant", "none"),
        "async_scheduling": engine.async_scheduling,
        "max_num_batched_tokens": engine.scheduler.max_num_batched_tokens,
        "gpu": torch.cuda.get_device_name(), "copy_bandwidth_GBps": bw / 1e9,
        "weight_GB": weight_bytes / 1e9, "roofline_tok_s": roofline,
        "quantization": getattr(engine.hf_config, "quantization_config", None),
        "read_GB": (weight_bytes - embed_bytes) / 1e9, "roofline_read_tok_s": bw / (weight_bytes - embed_bytes),
        "batch1_decode_tok_s": decode_tok_s, "batch1_fraction_of_roofline": decode_tok_s / roofline,
        "batch1_decode_tok_s_by_difference": rates["difference"],
        "batch1_fraction_of_read_roofline": decode_tok_s * (weight_bytes - embed_bytes) / bw,
        f"concurrent{args.concurrency}_output_tok_s": conc_tok_s,
        f"prefill{args.prefill_len}_tok_s": prefill_tok_s,
        "kv_capacity_tokens_logged": log.kv_tokens, "kv_element_bytes": spec_bytes,
        "memory_log": [line for line in log.lines if "GPU memory" in line or "KV cache" in line
                       or "CUDA graphs" in line],
    }
    baseline = getattr(args, "baseline", None)
    if baseline and baseline.is_file():
        base = json.loads(baseline.read_text())
        result["baseline"] = {"config": base["config"], "batch1_decode_tok_s": base["batch1_decode_tok_s"]}
        result["batch1_speedup_over_baseline"] = decode_tok_s / base["batch1_decode_tok_s"]
    return result


def main() -> None:
    args = parse_args()
    if not revolta_kernels.native_available():  # timing the torch reference would only measure its slowness
        raise SystemExit(f"gpu_e2e.py needs the native kernels: {revolta_kernels.native_status()}")
    bw = copy_bandwidth()
    llm, log = make_llm(args)
    result = measure(llm, args, log, bw)
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
