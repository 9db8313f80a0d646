"""Speculative decoding: what drafts gain, and what the MTP head costs per step.

- ``drafts`` (CPU or GPU): n-gram drafts, or a draft model: batch-1 output tokens per second with and without
  drafts, and how many drafts are accepted, on a text-copying request and an open question. Both engines run side
  by side and the rounds interleave, so machine drift falls on both. CPU: the embedded SmolLM2-135M; a GPU: pass
  ``--model`` (dummy weights make meaningless text, so use a real checkpoint).
- ``mtp`` (GPU): batch-1 decode of a hybrid model with dummy weights, plain against the MTP head with k drafts. The
  random head's drafts are rejected, so every step yields one token and the ratio is the head's catch-up and chain
  cost, the verification step included; with a real checkpoint's head, tokens per step = 1 + accepted drafts, so
  the break-even acceptance is what this ratio says.

    python3 benchmarks/spec_decode_bench.py drafts --out bench_out/spec_decode.json
    python3 benchmarks/spec_decode_bench.py drafts --draft-model self --out bench_out/spec_draft_self.json
    python3 benchmarks/spec_decode_bench.py mtp --config benchmarks/configs/qwen3.5-27b --out bench_out/mtp.json
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path

import torch
from common.e2e import decode_rate

from revolta_engine import LLM, SamplingParams

PASSAGE = ("The quick brown fox jumps over the lazy dog. Paged attention stores keys and values in fixed-size "
           "blocks, and prefix caching reuses blocks whose tokens hash to the same value. ")
TASKS = {
    "copy": [{"role": "user", "content": "Copy this text exactly, word for word:\n\n" + PASSAGE * 3}],
    "open": [{"role": "user", "content": "Write a short story about a lighthouse keeper."}],
}


def device_name() -> str:
    """The GPU's name, or "cpu"."""
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def timed_chat(llm: LLM, messages: list[dict], params: SamplingParams) -> tuple[float, int]:
    """Seconds for one chat request and the tokens it produced."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = llm.chat(messages, params)[0].outputs[0]
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0, len(out.token_ids)


def drafts(args: argparse.Namespace) -> dict:
    """Plain against speculative batch-1 decode on each task, rounds interleaved."""
    plain = LLM(args.model, max_model_len=1024)
    config: dict = {"method": "ngram", "num_speculative_tokens": args.k}
    if args.draft_model is not None:
        from revolta_engine.loader import default_model

        draft = args.draft_model if args.draft_model != "self" else (args.model or str(default_model()))
        config = {"model": draft, "num_speculative_tokens": args.k}
    elif args.lookup_min is not None:
        config.update(prompt_lookup_min=args.lookup_min, prompt_lookup_max=max(4, args.lookup_min))
    spec = LLM(args.model, max_model_len=1024, speculative_config=config)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    result: dict = {"model": args.model or "SmolLM2-135M-Instruct (embedded)", "config": config,
                    "device": device_name()}
    for name, messages in TASKS.items():
        for llm in (plain, spec):
            llm.chat(messages, SamplingParams(temperature=0.0, max_tokens=8))  # warm-up, prompt cached
        before = spec.llm_engine.get_stats()
        rates: dict[str, list[float]] = {"plain": [], "spec": []}
        for _ in range(args.rounds):
            for label, llm in (("plain", plain), ("spec", spec)):
                seconds, tokens = timed_chat(llm, messages, params)
                rates[label].append(tokens / seconds)
        after = spec.llm_engine.get_stats()
        drafted = after.spec_decode_num_draft_tokens - before.spec_decode_num_draft_tokens
        accepted = after.spec_decode_num_accepted_tokens - before.spec_decode_num_accepted_tokens
        plain_rate, spec_rate = statistics.median(rates["plain"]), statistics.median(rates["spec"])
        result[name] = {"tok_s_plain": plain_rate, "tok_s_spec": spec_rate, "speedup": spec_rate / plain_rate,
                        "draft_tokens": drafted, "accepted": accepted,
                        "acceptance": accepted / drafted if drafted else None}
    return result


def mtp(args: argparse.Namespace) -> dict:
    """Batch-1 decode rate without speculation and with the MTP head at each k, one engine at a time."""
    g = torch.Generator().manual_seed(0)
    result: dict = {"config": args.config, "dtype": args.dtype, "device": device_name(), "tok_s": {}}
    for k in [0] + [int(x) for x in args.ks.split(",")]:
        spec = {"method": "mtp", "num_speculative_tokens": k} if k else None
        llm = LLM(args.config, load_format="dummy", dtype=args.dtype, max_model_len=2048, max_num_seqs=8,
                  max_num_batched_tokens=2048, kv_cache_memory_bytes=16 * 2**30, enable_prefix_caching=False,
                  speculative_config=spec)
        vocab = int(llm.llm_engine.text_config.vocab_size)
        prompt = torch.randint(100, vocab - 100, (args.prompt_len,), generator=g).tolist()
        result["tok_s"]["plain" if k == 0 else f"mtp_k{k}"] = decode_rate(llm, prompt, args.output_len)
        if k:
            stats = llm.llm_engine.get_stats()
            result[f"mtp_k{k}_accepted"] = [stats.spec_decode_num_accepted_tokens, stats.spec_decode_num_draft_tokens]
        llm.llm_engine.shutdown()
        del llm
        gc.collect()
        torch.cuda.empty_cache()
    plain = result["tok_s"]["plain"]
    result["step_time_ratio"] = {name: plain / rate for name, rate in result["tok_s"].items() if name != "plain"}
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("drafts", help="n-gram or draft-model speculation against plain decode")
    d.set_defaults(fn=drafts)
    d.add_argument("--model", default=None, help="checkpoint (default: the embedded SmolLM2-135M)")
    d.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    d.add_argument("--lookup-min", type=int, default=None, help="prompt_lookup_min (default: the engine's)")
    d.add_argument("--draft-model", default=None,
                   help="draft-model speculation with this checkpoint ('self': the target drafts for itself, "
                        "which shows the mechanics' cost at full acceptance) instead of n-gram drafts")
    d.add_argument("--max-tokens", type=int, default=96)
    d.add_argument("--rounds", type=int, default=3)
    m = sub.add_parser("mtp", help="the MTP head's cost per step (GPU, dummy weights)")
    m.set_defaults(fn=mtp)
    m.add_argument("--config", default="benchmarks/configs/qwen3.5-27b")
    m.add_argument("--dtype", default="float16")
    m.add_argument("--ks", default="1,3", help="comma-separated num_speculative_tokens to compare with plain")
    m.add_argument("--prompt-len", type=int, default=512)
    m.add_argument("--output-len", type=int, default=64)
    for p in (d, m):
        p.add_argument("--out", type=Path, default=None, help="default: bench_out/spec_decode_COMMAND.json")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result = args.fn(args)
    text = json.dumps(result, indent=2)
    print(text)
    out = args.out or Path(f"bench_out/spec_decode_{args.command}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


if __name__ == "__main__":
    main()
