"""Speculative decoding: what a verification step costs, what drafts of known acceptance gain, what n-gram drafts
gain on a copying task.

- ``steps`` (GPU): batch-1 step cost of speculation that yields no extra tokens, against plain decode: the MTP head
  at k=1 and k=3 on Qwen3.5-27B (dummy weights: the random head's drafts are rejected, so every step yields one
  token and the ratio is the head's and the verification's cost; with a real head, tokens per step = 1 +
  accepted drafts, so the break-even acceptance is what this ratio says), and n-gram k=4 on Llama-3.1-8B over
  prompts of distinct tokens (no n-gram repeats, so no drafts: the cost of having speculation on; the row's
  ``drafted`` says whether the dummy model's output repeated itself after all).
  ``step_cost_ratio`` = spec step time / plain step time (the decode rates' ratio times the spec run's tokens per
  step, in case some drafts were accepted after all).
- ``oracle`` (GPU): decode tok/s with the oracle proposer (``common/oracle.py``: the target's recorded greedy
  continuation, each draft right with probability p) at p in {0.6, 0.8, 1.0} x k in {1, 3, 5}, batch 1 and 8, on
  the Llama-3.1-8B and Qwen3.5-27B shapes, against plain decode of the same prompts in the same run; each row has
  the measured mean acceptance length (engine stats) beside the expected one. ``off_record`` counts requests whose
  output left the recording (the verification pass rounds differently from plain decode), after which the drafts
  are no longer the target's tokens and the measured acceptance falls below the expected one.
- ``gpu``: ``steps`` and ``oracle`` in one run, sharing each model's plain engine (the figures of the bar).
- ``drafts`` (CPU or GPU): n-gram drafts, or a draft model: batch-1 output tokens per second with and without
  drafts, and how many drafts are accepted, on a text-copying request and an open question. Both engines run side
  by side and the rounds interleave, so machine drift falls on both. CPU: the embedded SmolLM2-135M; a GPU: pass
  ``--model`` (dummy weights make meaningless text, so use a real checkpoint).

``--quick`` runs ``steps`` / ``oracle`` / ``gpu`` on tiny versions of the two shapes (hidden 64, 2 or 4 layers,
float32), short prompts and outputs: a smoke run on the CPU (a few minutes on two cores).

    python benchmarks/spec_decode_bench.py gpu --out bench_out/spec_decode_gpu.json   # H100: estimated 5-7 min
    python benchmarks/spec_decode_bench.py steps --models qwen3.5-27b
    python benchmarks/spec_decode_bench.py oracle --models llama-3.1-8b --ks 3 --batches 1,8
    python benchmarks/spec_decode_bench.py gpu --quick                                  # CPU smoke run
    python benchmarks/spec_decode_bench.py drafts --out bench_out/spec_decode_drafts.json   # CPU, SmolLM2
    python benchmarks/spec_decode_bench.py drafts --draft-model self
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from common.oracle import OracleProposer, expected_acceptance_length, install_oracle
from common.spec_runs import (
    SHAPES,
    RunSettings,
    build_engine,
    decode_rate,
    device_name,
    distinct_prompts,
    model_dir,
    release,
    spec_counters,
    warm_up,
)

from revolta_engine import LLM, SamplingParams

PASSAGE = ("The quick brown fox jumps over the lazy dog. Paged attention stores keys and values in fixed-size "
           "blocks, and prefix caching reuses blocks whose tokens hash to the same value. ")
TASKS = {
    "copy": [{"role": "user", "content": "Copy this text exactly, word for word:\n\n" + PASSAGE * 3}],
    "open": [{"role": "user", "content": "Write a short story about a lighthouse keeper."}],
}
# The step-cost variants of each shape (``steps``): speculation whose drafts yield nothing on dummy weights.
STEP_VARIANTS: dict[str, dict[str, dict]] = {
    "llama-3.1-8b": {"ngram_k4": {"method": "ngram", "num_speculative_tokens": 4}},
    "qwen3.5-27b": {"mtp_k1": {"method": "mtp", "num_speculative_tokens": 1},
                    "mtp_k3": {"method": "mtp", "num_speculative_tokens": 3}},
}
# The bar each figure is held to: (model, figure path, "max" or "min", threshold).
BAR = [("qwen3.5-27b", ("steps", "mtp_k1", "step_cost_ratio"), "max", 1.15),
       ("qwen3.5-27b", ("steps", "mtp_k3", "step_cost_ratio"), "max", 1.30),
       ("llama-3.1-8b", ("steps", "ngram_k4", "step_cost_ratio"), "max", 1.02),
       ("llama-3.1-8b", ("oracle", "k3_p1.0_b1", "speedup"), "min", 3.2),
       ("llama-3.1-8b", ("oracle", "k3_p0.8_b1", "speedup"), "min", 2.3),
       ("llama-3.1-8b", ("oracle", "k3_p1.0_b8", "speedup"), "min", 2.5)]


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


def measure_model(name: str, path: Path, settings: RunSettings, args: argparse.Namespace, steps: bool,
                  oracle: bool, result: dict, save: Callable[[], None]) -> None:
    """One model shape into ``result``: its plain engine (decode rates, and the greedy continuations the oracle
    replays), then the step-cost variants (``steps``) and the oracle engines (``oracle``), one engine at a time,
    calling ``save`` after each engine (a run cut short keeps what it measured)."""
    batches = sorted({1, *args.batches}) if steps else args.batches
    plain, build_s = build_engine(path, settings)
    vocab = int(plain.llm_engine.text_config.vocab_size)
    prompts = {b: distinct_prompts(b, settings.prompt_len, vocab, seed=100 + b) for b in batches}
    result.update({"config": str(path), "build_s": {"plain": build_s}, "plain_tok_s": {},
                   "plain_deterministic": {}, "async_scheduling": plain.llm_engine.async_scheduling})
    records: dict[tuple[int, ...], list[int]] = {}
    for b in batches:
        rate, tokens, same = decode_rate(plain, prompts[b], settings)
        result["plain_tok_s"][f"b{b}"], result["plain_deterministic"][f"b{b}"] = rate, same
        records.update({tuple(p): t for p, t in zip(prompts[b], tokens, strict=True)})
    release(plain)
    save()
    if steps:
        result["steps"] = {}
        for label, spec in STEP_VARIANTS[name].items():
            llm, build_s = build_engine(path, settings, spec)
            result["build_s"][label] = build_s
            warm_up(llm, prompts[1], settings)
            before = llm.llm_engine.get_stats()
            rate, _, _ = decode_rate(llm, prompts[1], settings, warm=False)
            counters = spec_counters(before, llm.llm_engine.get_stats())
            decoded = (settings.output_len - 1) * settings.reps  # batch 1: steps = decoded tokens - accepted drafts
            tokens_per_step = decoded / max(decoded - counters["accepted"], 1)
            result["steps"][label] = {"tok_s": rate, "tok_s_ratio": result["plain_tok_s"]["b1"] / rate,
                                      "step_cost_ratio": result["plain_tok_s"]["b1"] / rate * tokens_per_step,
                                      "async_scheduling": llm.llm_engine.async_scheduling, **counters}
            release(llm)
            save()
    if oracle:
        result["oracle"] = {}
        measure_oracle(path, settings, args, prompts, records, result, save)


def measure_oracle(path: Path, settings: RunSettings, args: argparse.Namespace, prompts: dict[int, list[list[int]]],
                   records: dict[tuple[int, ...], list[int]], result: dict, save: Callable[[], None]) -> None:
    """Oracle rows ``k{k}_p{p}_b{batch}`` into ``result["oracle"]``: tok/s, speedup over plain at that batch,
    acceptance measured and expected, one engine per k (built with n-gram drafts of k tokens, the oracle in their
    place)."""
    rows: dict[str, dict] = result["oracle"]
    for k in args.ks:
        llm, build_s = build_engine(path, settings, {"method": "ngram", "num_speculative_tokens": k})
        result["build_s"][f"oracle_k{k}"] = build_s
        oracle = OracleProposer(records, 1.0, int(llm.llm_engine.text_config.vocab_size))
        install_oracle(llm, oracle)
        for b in args.batches:
            warm_up(llm, prompts[b], settings)
            for p in args.ps:
                oracle.reset(p, seed=1000 * k + b)
                before = llm.llm_engine.get_stats()
                rate, _, _ = decode_rate(llm, prompts[b], settings, warm=False)
                counters = spec_counters(before, llm.llm_engine.get_stats())
                rows[f"k{k}_p{p}_b{b}"] = {
                    "k": k, "p": p, "batch": b, "tok_s": rate, "speedup": rate / result["plain_tok_s"][f"b{b}"],
                    "acceptance_length": counters["acceptance_length"],
                    "expected_acceptance_length": oracle.counters()["expected_acceptance_length"],
                    "nominal_acceptance_length": expected_acceptance_length(p, k),
                    "planned_acceptance_length": oracle.counters()["planned_acceptance_length"],
                    "per_position_rate": counters["per_position_rate"], "off_record": oracle.off_record,
                    "async_scheduling": llm.llm_engine.async_scheduling}
        release(llm)
        save()


def bar_lines(models: dict[str, dict]) -> list[str]:
    """Each measured figure of the bar against its threshold."""
    lines = []
    for model, keys, kind, threshold in BAR:
        value = models.get(model, {})
        for key in keys:
            value = value.get(key, {}) if isinstance(value, dict) else {}
        if isinstance(value, (int, float)):
            ok = value <= threshold if kind == "max" else value >= threshold
            lines.append(f"{'ok  ' if ok else 'MISS'} {model} {'.'.join(keys)} = {value:.3f} "
                         f"({'<=' if kind == 'max' else '>='} {threshold})")
    return lines


def save_progress(path: Path, result: dict, model: dict, start: float, model_start: float) -> None:
    """Write the run so far (a run cut short keeps what it measured), with the seconds spent."""
    now = time.perf_counter()
    model["wall_s"], result["wall_s"] = now - model_start, now - start
    write_json(path, result)


def speculation(args: argparse.Namespace) -> dict:
    """``steps``, ``oracle`` or both (``gpu``) on each model shape, one engine at a time."""
    quick = args.quick
    settings = RunSettings(dtype=args.dtype or ("float32" if quick else "float16"),
                           prompt_len=args.prompt_len or (32 if quick else 128),
                           output_len=args.output_len or (24 if quick else 96), reps=args.reps,
                           max_model_len=512 if quick else 1024,
                           kv_cache_bytes=(256 << 20) if quick else (16 << 30))
    unknown = sorted(set(args.models) - set(SHAPES))
    if unknown:
        raise SystemExit(f"unknown model shapes {unknown}; choose from {', '.join(SHAPES)}")
    steps, oracle = args.command in ("steps", "gpu"), args.command in ("oracle", "gpu")
    result: dict = {"device": device_name(), "quick": quick, "settings": settings.__dict__, "models": {},
                    "complete": False}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.models:
            t0 = time.perf_counter()
            model: dict = result["models"].setdefault(name, {})
            save = functools.partial(save_progress, out_path(args), result, model, start, t0)
            measure_model(name, model_dir(name, quick, Path(scratch)), settings, args, steps, oracle, model, save)
            save()
    result["complete"] = True
    result["bar"] = [] if quick else bar_lines(result["models"])  # tiny shapes' figures mean nothing for it
    return result


def summary(result: dict) -> list[str]:
    """The figures in a few lines per model."""
    lines = [f"{result['device']}, {result['wall_s']:.0f} s"]
    for name, m in result.get("models", {}).items():
        lines.append(f"{name} ({m['wall_s']:.0f} s, {sum(m['build_s'].values()):.0f} s of it building engines): "
                     "plain " + ", ".join(f"{b} {r:.1f} tok/s" for b, r in m["plain_tok_s"].items()))
        for label, s in m.get("steps", {}).items():
            lines.append(f"  {label}: step cost x{s['step_cost_ratio']:.3f} ({s['tok_s']:.1f} tok/s, "
                         f"{s['accepted']}/{s['drafted']} drafts accepted)")
        for label, r in m.get("oracle", {}).items():
            measured = r["acceptance_length"]
            lines.append(f"  oracle {label}: {r['tok_s']:.1f} tok/s x{r['speedup']:.2f}, acceptance length "
                         f"{'-' if measured is None else f'{measured:.2f}'} (planned "
                         f"{r['planned_acceptance_length']:.2f}, expected {r['expected_acceptance_length']:.2f}), "
                         f"off record {r['off_record']}")
    return lines + result.get("bar", [])


def csv(kind: Callable[[str], Any]) -> Callable[[str], list]:
    """An argparse type: comma-separated values of ``kind``."""
    return lambda text: [kind(x) for x in text.split(",") if x]


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
    parsers = [d]
    for command, text in (("steps", "step cost of speculation that yields nothing (GPU, dummy weights)"),
                          ("oracle", "tok/s at a known acceptance (GPU, dummy weights)"),
                          ("gpu", "steps and oracle in one run")):
        s = sub.add_parser(command, help=text)
        s.set_defaults(fn=speculation)
        s.add_argument("--models", type=csv(str), default=list(SHAPES), help=f"of {', '.join(SHAPES)}")
        s.add_argument("--ks", type=csv(int), default=[1, 3, 5], help="oracle: num_speculative_tokens")
        s.add_argument("--ps", type=csv(float), default=[0.6, 0.8, 1.0], help="oracle: chance a draft is right")
        s.add_argument("--batches", type=csv(int), default=[1, 8], help="oracle: concurrent requests")
        s.add_argument("--dtype", default=None, help="default float16 (float32 with --quick)")
        s.add_argument("--prompt-len", type=int, default=None, help="default 128 (32 with --quick)")
        s.add_argument("--output-len", type=int, default=None, help="tokens per request; default 96 (24 with --quick)")
        s.add_argument("--reps", type=int, default=2, help="timed runs per figure (the median is kept)")
        s.add_argument("--quick", action="store_true", help="tiny versions of the shapes: a CPU smoke run")
        parsers.append(s)
    for p in parsers:
        p.add_argument("--out", type=Path, default=None, help="default: bench_out/spec_decode_COMMAND.json")
    return ap.parse_args(argv)


def out_path(args: argparse.Namespace) -> Path:
    """``--out``, or bench_out/spec_decode_COMMAND[_quick].json."""
    quick = "_quick" if getattr(args, "quick", False) else ""
    return args.out or Path(f"bench_out/spec_decode_{args.command}{quick}.json")


def write_json(path: Path, result: dict) -> str:
    """Write ``result`` to ``path`` (its folder made); return the text."""
    text = json.dumps(result, indent=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result = args.fn(args)
    print(write_json(out_path(args), result))
    if args.fn is speculation:
        print("\n".join(summary(result)))


if __name__ == "__main__":
    main()
