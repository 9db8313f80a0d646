"""Every environment variable the engine, the API server and the command line read, declared once and typed.

The variables of the kernels package live in :mod:`revolta_kernels.envs` (same :class:`EnvVar`); nothing else in
the workspace reads ``os.environ`` for a ``REVOLTA_*`` name. :func:`all_env_vars` lists both packages'
variables; the startup configuration report prints every one that is set.
"""

from __future__ import annotations

from revolta_kernels import envs as kernel_envs
from revolta_kernels.envs import EnvVar, parse_bool

_PKG = "revolta-engine"


def _declare(name, parse, default, doc, aliases=()):  # type: ignore[no-untyped-def]
    return kernel_envs.declare(name, parse, default, doc, package=_PKG, aliases=aliases)


DEVICE = _declare(
    "REVOLTA_DEVICE", str, "",
    "Default for `--device` (`auto`, `cpu`, `cuda`, `cuda:N`) when the command line does not give one.")
KV_CACHE_MEMORY_BYTES = _declare(
    "REVOLTA_KV_CACHE_MEMORY_BYTES", int, 0,
    "Default for `--kv-cache-memory-bytes`: bytes of KV cache to allocate instead of sizing it from "
    "`--gpu-memory-utilization`.")
MAX_NUM_BATCHED_TOKENS = _declare(
    "REVOLTA_MAX_NUM_BATCHED_TOKENS", int, 0,
    "Default for `--max-num-batched-tokens`, the token budget of one engine step.")
ACTIVATION_QUANT = _declare(
    "REVOLTA_ACTIVATION_QUANT", str, "",
    "Default for `--activation-quant` (`none` or `int8`: int8 activations in the quantized decode projections).")
ALLOW_LONG_MAX_MODEL_LEN = _declare(
    "REVOLTA_ALLOW_LONG_MAX_MODEL_LEN", parse_bool, False,
    "`1`: accept a `--max-model-len` past the positions the model was trained for (vLLM's "
    "`VLLM_ALLOW_LONG_MAX_MODEL_LEN` works too).", aliases=("VLLM_ALLOW_LONG_MAX_MODEL_LEN",))
LOG_STATS_INTERVAL = _declare(
    "REVOLTA_LOG_STATS_INTERVAL", float, 10.0,
    "Seconds between the server's periodic throughput and cache log lines (vLLM's `VLLM_LOG_STATS_INTERVAL` "
    "works too).", aliases=("VLLM_LOG_STATS_INTERVAL",))


def all_env_vars() -> list[EnvVar]:
    """Every declared variable of the kernels and the engine packages, kernels first."""
    return [*kernel_envs.all_env_vars(), *(v for v in kernel_envs.registered().values() if v.package == _PKG)]


def set_env_vars() -> list[tuple[str, str]]:
    """``(name, text)`` of every declared variable (or alias) that is set, kernels' and engine's, for the startup
    configuration report."""
    return kernel_envs.set_env_vars()
