"""KV offload on a GPU: time to first token of a long prompt whose blocks left the GPU cache, recomputed or
copied back from CPU memory or from files, and what the write-through stores cost a prefill.

Dummy weights of a real model shape (``--config``); every engine uses the same seed, so a restarted engine has the
same weights and the same cache-layout fingerprint and finds the files the first one wrote. Rounds use fresh
prompts; each figure is the median over rounds.

    python3 benchmarks/kv_offload_bench.py --config benchmarks/configs/llama-3.1-8b --prompt-len 8192 --out kv_offload.json
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from revolta_engine import LLM, SamplingParams

sys.path.insert(0, str(Path(__file__).parent))
from gpu_e2e import random_prompts  # noqa: E402

ONE_TOKEN = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)


def ttft(llm: LLM, prompt: list[int]) -> float:
    """Seconds to prefill ``prompt`` and sample one token."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    llm.generate({"prompt_token_ids": prompt}, ONE_TOKEN)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def make(args: argparse.Namespace, **offload) -> LLM:
    return LLM(args.config, load_format="dummy", max_model_len=args.prompt_len + 64,
               max_num_batched_tokens=args.prompt_len, seed=0, kv_cache_memory_bytes=4 << 30, **offload)


def release() -> None:
    """Give the GPU memory of an engine the caller has deleted back before the next one starts."""
    gc.collect()
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
    vocab = 32000
    warm, *rounds = random_prompts(args.rounds + 1, args.prompt_len, vocab, 7)

    base = make(args, enable_prefix_caching=False)
    ttft(base, warm)
    t_plain = [ttft(base, p) for p in rounds]
    del base
    release()

    llm = make(args, kv_offloading_size=args.cpu_gib, kv_offload_path=root,
               kv_offload_disk_size=64.0)
    engine = llm.llm_engine
    block_bytes = engine.kv_connector.stats
    ttft(llm, warm)
    t_cold, t_gpu, t_cpu, cpu_bytes = [], [], [], []
    for p in rounds:
        t_cold.append(ttft(llm, p))
        t_gpu.append(ttft(llm, p))
        engine.kv_connector.flush()
        assert engine.kv.pool.reset_prefix_cache()
        loaded = block_bytes().bytes_loaded
        t_cpu.append(ttft(llm, p))
        cpu_bytes.append(block_bytes().bytes_loaded - loaded)
    engine.shutdown()
    files = engine.kv_connector.stats().tiers["disk"]
    del llm, engine
    release()

    disk = make(args, kv_offload_path=root, kv_offload_disk_size=64.0)
    ttft(disk, warm)  # its own warm-up also reads the warm prompt's files
    t_disk = [ttft(disk, p) for p in rounds]
    hits = disk.llm_engine.get_stats().external_prefix_cache_hits
    disk.llm_engine.shutdown()
    del disk
    release()

    med = statistics.median
    result = {
        "config": args.config, "prompt_len": args.prompt_len, "rounds": len(rounds), "gpu": torch.cuda.get_device_name(),
        "ttft_s": {"no_offload": med(t_plain), "recompute_with_offload": med(t_cold), "gpu_prefix_hit": med(t_gpu),
                   "cpu_tier_hit": med(t_cpu), "file_tier_hit": med(t_disk)},
        "speedup_over_recompute": {"cpu_tier": med(t_plain) / med(t_cpu), "file_tier": med(t_plain) / med(t_disk)},
        "store_overhead_on_prefill": med(t_cold) / med(t_plain) - 1,
        "cpu_tier_load_GBps": med(cpu_bytes) / med(t_cpu) / 1e9,
        "file_tier": files, "file_tier_hit_tokens": hits,
    }
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
