"""KV offload: time to first token of a long prompt whose blocks left the GPU cache, recomputed or
copied back from CPU memory or from files, and what the write-through stores cost a prefill.

On a GPU: dummy weights of a real model shape (``--config``); every engine uses the same seed, so a restarted
engine has the same weights and the same cache-layout fingerprint and finds the files the first one wrote. On the
CPU (``--config default``): the embedded SmolLM2-135M with its real weights. Rounds use fresh prompts; each figure
is the median over rounds.

    python3 benchmarks/kv_offload_bench.py --config benchmarks/configs/llama-3.1-8b --prompt-len 8192
    python3 benchmarks/kv_offload_bench.py --config default --prompt-len 2048   # CPU
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from common.e2e import random_prompts

from revolta_engine import LLM, SamplingParams

ONE_TOKEN = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def ttft(llm: LLM, prompt: list[int]) -> float:
    """Seconds to prefill ``prompt`` and sample one token."""
    sync()
    t0 = time.perf_counter()
    llm.generate({"prompt_token_ids": prompt}, ONE_TOKEN)
    sync()
    return time.perf_counter() - t0


def make(args: argparse.Namespace, **offload) -> LLM:
    model = None if args.config == "default" else args.config
    load = {} if model is None else {"load_format": "dummy"}
    return LLM(model, max_model_len=args.prompt_len + 64, max_num_batched_tokens=args.prompt_len, seed=0,
               kv_cache_memory_bytes=(4 << 30) if torch.cuda.is_available() else (1 << 30), **load, **offload)


def release() -> None:
    """Give the GPU memory of an engine the caller has deleted back before the next one starts."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="benchmarks/configs/llama-3.1-8b")
    ap.add_argument("--prompt-len", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu-gib", type=float, default=16.0, help="CPU tier size")
    ap.add_argument("--dir", default=None, help="directory for the file tier (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=Path("bench_out/kv_offload.json"))
    args = ap.parse_args(argv)
    root = args.dir or tempfile.mkdtemp(prefix="revolta-kv-")
    vocab = 32000 if args.config != "default" else 49000
    warm, *rounds = random_prompts(args.rounds + 1, args.prompt_len, vocab, 7)

    # Three engines side by side, so every figure of a round is taken under the same machine state: one without
    # offload, one storing into CPU memory and files, and one reading only those files (a restarted server).
    base = make(args, enable_prefix_caching=False)
    llm = make(args, kv_offloading_size=args.cpu_gib, kv_offload_path=root, kv_offload_disk_size=64.0)
    disk = make(args, kv_offload_path=root, kv_offload_disk_size=64.0)
    engine = llm.llm_engine
    for e in (base, llm, disk):
        ttft(e, warm)
    t_plain, t_cold, t_gpu, t_cpu, t_disk, cpu_bytes = [], [], [], [], [], []
    for p in rounds:
        t_plain.append(ttft(base, p))
        t_cold.append(ttft(llm, p))
        t_gpu.append(ttft(llm, p))
        engine.kv_connector.flush()
        assert engine.kv.pool.reset_prefix_cache()
        loaded = engine.kv_connector.stats().bytes_loaded
        t_cpu.append(ttft(llm, p))
        cpu_bytes.append(engine.kv_connector.stats().bytes_loaded - loaded)
        t_disk.append(ttft(disk, p))
    engine.shutdown()
    files = engine.kv_connector.stats().tiers["disk"]
    hits = disk.llm_engine.get_stats().external_prefix_cache_hits
    disk.llm_engine.shutdown()
    del base, llm, disk, engine
    release()

    med = statistics.median
    result = {
        "config": args.config, "prompt_len": args.prompt_len, "rounds": len(rounds), "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "ttft_s": {"no_offload": med(t_plain), "recompute_with_offload": med(t_cold), "gpu_prefix_hit": med(t_gpu),
                   "cpu_tier_hit": med(t_cpu), "file_tier_hit": med(t_disk)},
        "speedup_over_recompute": {"cpu_tier": med(t_plain) / med(t_cpu), "file_tier": med(t_plain) / med(t_disk)},
        "store_overhead_on_prefill": med(t_cold) / med(t_plain) - 1,
        "cpu_tier_hit_bytes": med(cpu_bytes),
        "file_tier": files, "file_tier_hit_tokens": hits,
    }
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
