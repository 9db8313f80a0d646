"""Where each configuration value came from: ``user`` > ``env`` > ``profile`` > ``default``.

A value's source is one of ``user`` (passed explicitly), ``env`` (a ``REVOLTA_*`` variable of
:mod:`revolta_engine.envs`), ``profile`` (chosen for this device and model) or ``default``. The startup log prints
every value with its source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from revolta_engine import envs
from revolta_engine.config.args import EngineArgs
from revolta_engine.envs import EnvVar

SOURCES = ("default", "profile", "env", "user")
_UNSET: Any = object()

# Engine options whose default a variable overrides (the user's explicit argument still wins).
ENV_OVERRIDES: dict[str, EnvVar] = {
    "kv_cache_memory_bytes": envs.KV_CACHE_MEMORY_BYTES,
    "device": envs.DEVICE,
    "max_num_batched_tokens": envs.MAX_NUM_BATCHED_TOKENS,
    "activation_quant": envs.ACTIVATION_QUANT,
}


@dataclass(frozen=True)
class ResolvedValue:
    """One configuration value and where it came from."""

    value: Any
    source: str


class ConfigResolver:
    """Resolves each engine option from user > env > profile > default, recording the source in order."""

    def __init__(self, args: EngineArgs) -> None:
        self.args = args
        self.values: dict[str, ResolvedValue] = {}

    def resolve(self, name: str, profile_value: Any = _UNSET) -> Any:
        """Return the value of ``name`` and record its source (a variable's text parsed by its declaration)."""
        user_value = getattr(self.args, name)
        var = ENV_OVERRIDES.get(name)
        if name in self.args.explicit and user_value is not None:
            rv = ResolvedValue(user_value, "user")
        elif var is not None and var.is_set():
            rv = ResolvedValue(var.get(), "env")
        elif profile_value is not _UNSET:
            rv = ResolvedValue(profile_value, "profile")
        else:
            rv = ResolvedValue(user_value, "default")
        self.values[name] = rv
        return rv.value

    def set(self, name: str, value: Any, source: str) -> None:
        """Record a derived value."""
        assert source in SOURCES, f"unknown source {source}"
        self.values[name] = ResolvedValue(value, source)

    def source_of(self, name: str) -> str:
        """``user`` when the caller gave ``name`` explicitly, else ``default`` (for values derived from it)."""
        return "user" if name in self.args.explicit else "default"

    def report(self) -> list[tuple[str, Any, str]]:
        """Every resolved value as ``(name, value, source)``."""
        return [(k, v.value, v.source) for k, v in self.values.items()]
