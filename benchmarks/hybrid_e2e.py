"""Batch-1 decode of a hybrid model (MoE or dense) with dummy weights against the roofline of its active parameters.

Active bytes per token: every weight except the embedding table (one row is read), with the routed experts
counted at top_k / num_experts of their size (the shared expert in full). The roofline is the copy bandwidth
measured in the same run over those bytes. Reports the prompt's time to first token (median of three), the engine's
decode rate (``LLM.generate``, CUDA graphs and eager), and the parts of a step: the captured forward (graph replay), the LM head, and the rest (host).
Usage: ``python benchmarks/hybrid_e2e.py --config benchmarks/configs/qwen3.5-35b-a3b --out $OUT/e2e.json``
(``benchmarks/configs/qwen3.5-27b`` and ``qwen3.5-27b-awq``: the dense 27B, fp16 and AWQ int4 g128).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

import torch
from common.e2e import copy_bandwidth, decode_rate, decode_rates, event_ms, kernel_breakdown, timed_generate

from revolta_engine import LLM, SamplingParams


def active_bytes(model, config) -> tuple[int, int]:
    """(bytes read per decoded token by the weights, all weight bytes)."""
    experts = getattr(config, "num_experts", 0) or 0  # dense hybrids (Qwen3.5-27B) have none
    frac = config.num_experts_per_tok / experts if experts else 1.0
    active = total = 0
    for name, p in model.named_parameters():
        nbytes = p.numel() * p.element_size()
        total += nbytes
        if "embed_tokens" in name:
            continue
        active += nbytes * frac if ".experts." in name else nbytes
    return int(active), total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", default="benchmarks/configs/qwen3.5-35b-a3b")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--eager-output-len", type=int, default=24)
    ap.add_argument("--sync", action="store_true", help="the synchronous engine loop instead of async scheduling")
    ap.add_argument("--out", type=Path, default=Path("bench_out/hybrid_e2e.json"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logging.getLogger("revolta_engine").addHandler(Keep())
    bw = copy_bandwidth()
    t0 = time.perf_counter()
    llm = LLM(args.config, load_format="dummy", dtype=args.dtype, max_model_len=2048, max_num_seqs=8,
              max_num_batched_tokens=2048, kv_cache_memory_bytes=4 * 2**30, enable_prefix_caching=False,
              async_scheduling=not args.sync)
    build_s = time.perf_counter() - t0
    engine = llm.llm_engine
    model, config = engine.model, engine.hf_config
    active, total = active_bytes(model, config)
    roofline = bw / active
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, config.vocab_size - 100, (args.prompt_len,), generator=g).tolist()
    llm.generate([{"prompt_token_ids": prompt}], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))
    # time to first token of this prompt alone (the prefill forward, its sampling and the request's start and end)
    ttft_s = statistics.median(timed_generate(llm, [prompt], 1) for _ in range(3))

    graphs = engine.runner.graph_runner
    result: dict = {
        "config": args.config, "dtype": args.dtype, "gpu": torch.cuda.get_device_name(),
        "copy_bandwidth_GBps": bw / 1e9, "weights_GB": total / 1e9, "active_weight_GB": active / 1e9,
        "roofline_tok_s": roofline, "build_s": build_s, "cuda_graphs": graphs is not None,
        "async_scheduling": engine.async_scheduling, "prompt_len": args.prompt_len,
        "ttft_ms": ttft_s * 1e3, "prefill_tok_s": args.prompt_len / ttft_s,
    }
    if graphs is not None:
        rates = decode_rates(llm, prompt, args.output_len)
        rate = rates["per_token"]
        last = graphs.last_bucket  # the batch-1 graph of the context the decode ended at; its inputs are in place
        forward_ms = event_ms(graphs.graphs[last].replay)
        hidden = graphs.outputs[last][:1]
        with torch.inference_mode():
            head_ms = event_ms(lambda: model.compute_logits(hidden))
        result.update({
            "batch1_decode_tok_s": rate, "batch1_fraction_of_roofline": rate / roofline,
            "batch1_decode_tok_s_by_difference": rates["difference"],
            "graph_forward_ms": forward_ms, "lm_head_ms": head_ms,
            "forward_plus_head_fraction_of_roofline": (1e3 / (forward_ms + head_ms)) / roofline,
            "host_and_sampling_ms_per_step": 1e3 / rate - forward_ms - head_ms,
        })
        result["graph_forward_top_kernels"] = kernel_breakdown(graphs.graphs[last].replay)
        engine.runner.graph_runner = None
    rate_eager = decode_rate(llm, prompt, args.eager_output_len, reps=1)
    result.update({"eager_batch1_decode_tok_s": rate_eager, "eager_fraction_of_roofline": rate_eager / roofline})
    engine.runner.graph_runner = graphs
    result["log"] = [m for m in lines if any(w in m for w in ("CUDA graphs", "KV cache", "GPU memory", "Recurrent",
                                                              "Loaded"))]
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
