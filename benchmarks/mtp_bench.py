"""What MTP speculation costs per step: batch-1 decode of a hybrid model with dummy weights, plain against the
MTP head with k drafts (a random head: its drafts are rejected, so every step yields one token and the ratio is
the head's catch-up and chain cost, the eager verification step included).

With a real checkpoint's head, tokens per step = 1 + accepted drafts; the break-even acceptance is what this
ratio says. Usage: ``python benchmarks/mtp_bench.py --config benchmarks/configs/qwen3.5-27b --out $OUT/mtp.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
from pathlib import Path

import torch
from common.e2e import decode_rate

from revolta_engine import LLM


def engine(config: str, dtype: str, k: int) -> LLM:
    spec = {"method": "mtp", "num_speculative_tokens": k} if k else None
    return LLM(config, load_format="dummy", dtype=dtype, max_model_len=2048, max_num_seqs=8,
               max_num_batched_tokens=2048, kv_cache_memory_bytes=16 * 2**30, enable_prefix_caching=False,
               speculative_config=spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="benchmarks/configs/qwen3.5-27b")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--k", default="1,3", help="comma-separated num_speculative_tokens to compare with plain")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--out", type=Path, default=Path("bench_out/mtp.json"))
    args = ap.parse_args()
    g = torch.Generator().manual_seed(0)
    result: dict = {"config": args.config, "dtype": args.dtype, "device": torch.cuda.get_device_name()
                    if torch.cuda.is_available() else "cpu", "tok_s": {}}
    for k in [0] + [int(x) for x in args.k.split(",")]:
        llm = engine(args.config, args.dtype, k)
        vocab = int(llm.llm_engine.text_config.vocab_size)
        prompt = torch.randint(100, vocab - 100, (args.prompt_len,), generator=g).tolist()
        result["tok_s"]["plain" if k == 0 else f"mtp_k{k}"] = decode_rate(llm, prompt, args.output_len)
        if k:
            stats = llm.llm_engine.get_stats()
            result[f"mtp_k{k}_accepted"] = [stats.spec_decode_num_accepted_tokens, stats.spec_decode_num_draft_tokens]
        llm.llm_engine.shutdown()
        del llm
        gc.collect()
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    plain = result["tok_s"]["plain"]
    result["step_time_ratio"] = {name: plain / rate for name, rate in result["tok_s"].items() if name != "plain"}
    text = json.dumps(result, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
