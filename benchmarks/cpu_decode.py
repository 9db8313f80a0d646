"""CPU decode speed of SmolLM2-135M (float32, 2 threads): ReVolta vs HF transformers in the same run.

Prints a table and writes JSON. Usage:
    uv run python benchmarks/cpu_decode.py [--tokens 64] [--batch 16] [--out bench_out/cpu_decode.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from revolta_engine import LLM, SamplingParams, default_model

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def bench_revolta(llm: LLM, prompt_ids: list[int], tokens: int, batch: int) -> float:
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    llm.generate([{"prompt_token_ids": prompt_ids}] * min(batch, 2), params, use_tqdm=False)  # warm-up
    # Distinct prompts so the batch is not one prefix-cache hit repeated.
    prompts = [{"prompt_token_ids": prompt_ids + [i + 10]} for i in range(batch)]
    # Decode rate: time to generate `tokens` minus the time to generate 1 (the prefill).
    one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    llm.llm_engine.kv.pool.reset_prefix_cache()
    t0 = time.perf_counter()
    llm.generate(prompts, one, use_tqdm=False)
    prefill = time.perf_counter() - t0
    llm.llm_engine.kv.pool.reset_prefix_cache()
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    total = time.perf_counter() - t0
    assert all(len(o.outputs[0].token_ids) == tokens for o in outs)
    return batch * (tokens - 1) / (total - prefill)


@torch.inference_mode()
def bench_transformers(prompt_ids: list[int], tokens: int) -> float:
    from transformers import AutoModelForCausalLM

    path = default_model()
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    ids = torch.tensor([prompt_ids])
    kwargs = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
    model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kwargs)
    t0 = time.perf_counter()
    model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kwargs)
    prefill = time.perf_counter() - t0
    t0 = time.perf_counter()
    model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, **kwargs)
    return (tokens - 1) / (time.perf_counter() - t0 - prefill)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("bench_out/cpu_decode.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    llm = LLM(dtype="float32", max_model_len=2048)
    tok = llm.get_tokenizer()
    prompt_ids = tok.encode(PROMPT)
    hf = bench_transformers(prompt_ids, args.tokens)
    b1 = bench_revolta(llm, prompt_ids, args.tokens, 1)
    bn = bench_revolta(llm, prompt_ids, args.tokens, args.batch)
    rows = [
        ("transformers float32, batch 1", hf, 1.0),
        ("revolta float32, batch 1", b1, b1 / hf),
        (f"revolta float32, {args.batch} requests (aggregate)", bn, bn / hf),
    ]
    print(f"SmolLM2-135M-Instruct decode on {args.threads} CPU threads, {args.tokens} tokens each")
    print(f"{'configuration':<48} {'tok/s':>8} {'vs HF':>7}")
    for name, rate, ratio in rows:
        print(f"{name:<48} {rate:8.1f} {ratio:6.2f}x")
    print(f"{args.batch}-request aggregate / revolta batch 1: {bn / b1:.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "threads": args.threads, "tokens": args.tokens, "batch": args.batch,
        "transformers_batch1_tok_s": hf, "revolta_batch1_tok_s": b1, "revolta_batchN_tok_s": bn,
        "batch1_vs_transformers": b1 / hf, "batchN_vs_batch1": bn / b1,
    }, indent=2))


if __name__ == "__main__":
    main()
