"""Engines and timed runs of the speculative-decoding benchmark: model shapes (the real configs, or tiny versions
of them for a CPU smoke run), engines of dummy weights, batch decode rates and the speculation counters of a run.

Every engine of a model is built with the same seed, so their dummy weights are the same tensors and the plain
engine's greedy continuation is the one a speculative engine verifies against.
"""

from __future__ import annotations

import gc
import json
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from revolta_engine import LLM, SamplingParams
from revolta_engine.engine.stats import EngineStats

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SHAPES = {"llama-3.1-8b": CONFIGS / "llama-3.1-8b", "qwen3.5-27b": CONFIGS / "qwen3.5-27b"}
# What a real config becomes for a CPU smoke run: hidden 64, 4 heads of 16, a 512-token vocabulary; a hybrid
# keeps its first four layer types (three Gated DeltaNet, one full attention).
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "vocab_size": 512, "bos_token_id": 1, "eos_token_id": 2, "linear_key_head_dim": 16,
        "linear_value_head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4}


@dataclass(frozen=True)
class RunSettings:
    """What every engine and timed run of one benchmark invocation shares."""

    dtype: str
    prompt_len: int
    output_len: int
    reps: int
    max_model_len: int
    kv_cache_bytes: int
    seed: int = 0


def model_dir(name: str, quick: bool, scratch: Path) -> Path:
    """The config directory of model shape ``name``: the real one, or with ``quick`` a tiny version of it written
    under ``scratch`` (dummy weights read nothing but ``config.json``)."""
    source = SHAPES[name]
    if not quick:
        return source
    config = json.loads((source / "config.json").read_text())
    config.update({key: value for key, value in TINY.items() if key in config or not key.startswith("linear_")})
    if "layer_types" in config:
        config["layer_types"] = config["layer_types"][:4]
        config["num_hidden_layers"] = 4
    else:
        config["num_hidden_layers"] = 2
    out = scratch / f"tiny-{name}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=1))
    return out


def build_engine(path: Path, settings: RunSettings, speculative: dict | None = None) -> tuple[LLM, float]:
    """An engine of dummy weights (up to 8 sequences, no prefix caching, so repeated prompts are recomputed) and
    the seconds its construction took (weights, cache, graph capture)."""
    start = time.perf_counter()
    llm = LLM(str(path), load_format="dummy", dtype=settings.dtype, max_model_len=settings.max_model_len,
              max_num_seqs=8, max_num_batched_tokens=max(2048, 8 * settings.prompt_len),
              kv_cache_memory_bytes=settings.kv_cache_bytes, enable_prefix_caching=False, seed=settings.seed,
              speculative_config=speculative)
    return llm, time.perf_counter() - start


def release(llm: LLM) -> None:
    """Shut the engine down and give its memory back before the next one is built."""
    llm.llm_engine.shutdown()
    del llm
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def distinct_prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """``n`` prompts of ``length`` distinct token ids each (clear of the vocabulary's first and last 100, or 5 for a
    tiny one): no n-gram occurs twice in a prompt, so n-gram lookup finds nothing in it."""
    rng = random.Random(seed)
    margin = 100 if vocab > 1000 else 5
    return [rng.sample(range(margin, vocab - margin), length) for _ in range(n)]


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed_decode(llm: LLM, prompts: list[list[int]], output_len: int) -> tuple[float, list[list[int]]]:
    """Decode tok/s of one greedy ``generate`` of ``prompts`` (exactly ``output_len`` tokens each): the tokens
    after each request's first, over the span from the first first token to the last token (the decode steps
    alone, as vLLM's TPOT), and the token ids."""
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True)
    _sync()
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    _sync()
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    assert all(len(t) == output_len for t in tokens), "every request runs to max_tokens"
    metrics = [o.metrics for o in outs]
    assert all(m is not None and m.first_token_time is not None and m.last_token_time is not None
               for m in metrics), "token timestamps are recorded"
    span = max(m.last_token_time for m in metrics) - min(m.first_token_time for m in metrics)  # type: ignore
    return sum(len(t) - 1 for t in tokens) / max(span, 1e-9), tokens


def warm_up(llm: LLM, prompts: list[list[int]], settings: RunSettings) -> None:
    """An untimed short run of ``prompts``: the first use of this batch's shapes is paid here."""
    timed_decode(llm, prompts, min(8, settings.output_len))


def decode_rate(llm: LLM, prompts: list[list[int]], settings: RunSettings,
                warm: bool = True) -> tuple[float, list[list[int]], bool]:
    """The median over ``settings.reps`` of :func:`timed_decode` (after :func:`warm_up`, with ``warm``), the last
    run's tokens, and whether every run produced the same tokens."""
    if warm:
        warm_up(llm, prompts, settings)
    rates, runs = [], []
    for _ in range(settings.reps):
        rate, tokens = timed_decode(llm, prompts, settings.output_len)
        rates.append(rate)
        runs.append(tokens)
    return statistics.median(rates), runs[-1], all(r == runs[0] for r in runs)


def spec_counters(before: EngineStats, after: EngineStats) -> dict:
    """What speculation did between two stats snapshots: verification steps, drafts proposed and accepted, the
    mean acceptance length (tokens per verification step) and the per-position acceptance rates (vLLM's)."""
    steps = after.spec_decode_num_drafts - before.spec_decode_num_drafts
    drafted = after.spec_decode_num_draft_tokens - before.spec_decode_num_draft_tokens
    accepted = after.spec_decode_num_accepted_tokens - before.spec_decode_num_accepted_tokens
    old = before.spec_decode_num_accepted_tokens_per_pos
    per_pos = [n - (old[i] if i < len(old) else 0) for i, n in enumerate(after.spec_decode_num_accepted_tokens_per_pos)]
    return {"verify_steps": steps, "drafted": drafted, "accepted": accepted,
            "acceptance_length": 1 + accepted / steps if steps else None,
            "per_position_rate": [round(n / steps, 4) for n in per_pos] if steps else []}


def device_name() -> str:
    """The GPU's name, or "cpu"."""
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
