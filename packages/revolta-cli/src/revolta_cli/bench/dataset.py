"""Benchmark prompts: random token ids of given lengths, reproducible from a seed (like vllm's random dataset)."""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from typing import Any

# Token ids drawn from this range exist in every modern tokenizer and are ordinary (non-special) tokens.
DEFAULT_TOKEN_RANGE = (1000, 10000)


@dataclass
class BenchRequest:
    """One benchmark request: its prompt (token ids, or text decoded from them) and lengths."""

    prompt: list[int] | str
    prompt_len: int
    output_len: int


def random_requests(num: int, input_len: int, output_len: int, seed: int = 0, range_ratio: float = 0.0,
                    token_range: tuple[int, int] = DEFAULT_TOKEN_RANGE, tokenizer: Any = None) -> list[BenchRequest]:
    """``num`` requests with input/output lengths in ``[len * (1 - range_ratio), len * (1 + range_ratio)]``.

    With a ``tokenizer`` the prompts are sent as text decoded from the ids (for servers that only take text).
    """
    rng = random.Random(seed)
    requests = []
    for _ in range(num):
        n_in = max(1, round(input_len * rng.uniform(1 - range_ratio, 1 + range_ratio)))
        n_out = max(1, round(output_len * rng.uniform(1 - range_ratio, 1 + range_ratio)))
        ids = [rng.randrange(*token_range) for _ in range(n_in)]
        prompt: list[int] | str = tokenizer.decode(ids) if tokenizer is not None else ids
        requests.append(BenchRequest(prompt, n_in, n_out))
    return requests


def add_token_range_flag(parser: argparse.ArgumentParser) -> None:
    """``--random-token-range LOW HIGH``."""
    parser.add_argument("--random-token-range", type=int, nargs=2, default=list(DEFAULT_TOKEN_RANGE),
                        metavar=("LOW", "HIGH"), help="prompt token ids are drawn from [LOW, HIGH)")


def add_random_dataset_flags(parser: argparse.ArgumentParser) -> None:
    """The random-prompt flags of ``bench serve`` and ``bench throughput`` (vLLM's names and defaults)."""
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--random-input-len", type=int, default=128)
    parser.add_argument("--random-output-len", type=int, default=64)
    parser.add_argument("--random-range-ratio", type=float, default=0.0)
    add_token_range_flag(parser)


def requests_from_flags(ns: argparse.Namespace, seed: int, tokenizer: Any = None) -> list[BenchRequest]:
    """The requests :func:`add_random_dataset_flags`' flags describe."""
    return random_requests(ns.num_prompts, ns.random_input_len, ns.random_output_len, seed, ns.random_range_ratio,
                           tuple(ns.random_token_range), tokenizer=tokenizer)
