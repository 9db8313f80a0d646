"""Speculative decoding (n-gram drafts, or a draft model): batch-1 output tokens per second with and without
drafts, and how many drafts are accepted, on a text-copying request and an open question.

Both engines run side by side and the rounds interleave, so machine drift falls on both. CPU: the embedded
SmolLM2-135M; a GPU: pass ``--model`` (dummy weights make meaningless text, so use a real checkpoint).

    python3 benchmarks/spec_decode_bench.py --out bench_out/spec_decode.json
    python3 benchmarks/spec_decode_bench.py --draft-model self --out bench_out/spec_draft_self.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from revolta_engine import LLM, SamplingParams

PASSAGE = ("The quick brown fox jumps over the lazy dog. Paged attention stores keys and values in fixed-size "
           "blocks, and prefix caching reuses blocks whose tokens hash to the same value. ")
TASKS = {
    "copy": [{"role": "user", "content": "Copy this text exactly, word for word:\n\n" + PASSAGE * 3}],
    "open": [{"role": "user", "content": "Write a short story about a lighthouse keeper."}],
}


def timed_chat(llm: LLM, messages: list[dict], params: SamplingParams) -> tuple[float, int]:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = llm.chat(messages, params)[0].outputs[0]
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0, len(out.token_ids)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="checkpoint (default: the embedded SmolLM2-135M)")
    ap.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    ap.add_argument("--lookup-min", type=int, default=None, help="prompt_lookup_min (default: the engine's)")
    ap.add_argument("--draft-model", default=None,
                    help="draft-model speculation with this checkpoint ('self': the target drafts for itself, "
                         "which shows the mechanics' cost at full acceptance) instead of n-gram drafts")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("bench_out/spec_decode.json"))
    args = ap.parse_args(argv)
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
                    "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"}
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
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
