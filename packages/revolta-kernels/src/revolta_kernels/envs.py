"""Every environment variable revolta-kernels reads, declared once and typed (the ``vllm/envs.py`` idea).

Nothing else in the package reads ``os.environ``, and the native library reads no environment at all: values it
needs arrive as call arguments. ``revolta_engine.envs`` declares the engine's variables with the same
:class:`EnvVar`; :func:`all_env_vars` here lists only this package's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

_REGISTRY: dict[str, EnvVar] = {}


def parse_bool(raw: str) -> bool:
    """``1/true/yes/on`` -> True, ``0/false/no/off`` -> False (case-insensitive); anything else is an error."""
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected 1/0 (or true/false), got {raw!r}")


@dataclass(frozen=True)
class EnvVar(Generic[T]):
    """One environment variable: its name, how its text is parsed, its default and what it does."""

    name: str
    parse: Callable[[str], T]
    default: T
    doc: str
    package: str
    aliases: tuple[str, ...] = ()  # other names read when this one is unset (vLLM's ``VLLM_*`` spelling)

    def lookup(self) -> tuple[str, str] | None:
        """``(name, text)`` of the first of the variable's names that is set and not empty, else None."""
        for name in (self.name, *self.aliases):
            text = os.environ.get(name)
            if text:
                return name, text
        return None

    def is_set(self) -> bool:
        """True when the variable (or one of its aliases) is present and not empty."""
        return self.lookup() is not None

    def raw(self) -> str | None:
        """The variable's text (or its first set alias's), None when unset or empty."""
        found = self.lookup()
        return found[1] if found is not None else None

    def get(self) -> T:
        """The parsed value, or the default when unset; a value that does not parse raises a ValueError naming
        the variable that was read."""
        found = self.lookup()
        if found is None:
            return self.default
        name, raw = found
        try:
            return self.parse(raw)
        except ValueError as exc:
            raise ValueError(f"{name}={raw!r}: {exc}") from None


def declare(name: str, parse: Callable[[str], T], default: T, doc: str, *, package: str = "revolta-kernels",
            aliases: tuple[str, ...] = ()) -> EnvVar[T]:
    """Register a variable once; declaring the same name twice is a programming error."""
    assert name not in _REGISTRY, f"{name} is declared twice"
    var = EnvVar(name, parse, default, doc, package, aliases)
    _REGISTRY[name] = var
    return var


def registered() -> dict[str, EnvVar]:
    """Every variable declared so far, by any package that uses :func:`declare` (name -> variable)."""
    return dict(_REGISTRY)


def all_env_vars() -> list[EnvVar]:
    """This package's variables, in declaration order."""
    return [v for v in _REGISTRY.values() if v.package == "revolta-kernels"]


def set_env_vars(package: str | None = None) -> list[tuple[str, str]]:
    """``(name, text)`` of every declared variable that is set (of one package, or all), aliases under their own
    names."""
    return [(name, os.environ[name]) for v in _REGISTRY.values() if package is None or v.package == package
            for name in (v.name, *v.aliases) if os.environ.get(name)]


def parse_arch(raw: str) -> int | None:
    """``70`` / ``7.0`` (or 75 / 7.5) -> 70 (75); the archs Volta mode can stand for."""
    arch = int(raw.replace(".", "")) if raw.replace(".", "").isdigit() else -1
    if arch not in (70, 75):
        raise ValueError(f"expected 70 (Volta) or 75 (Turing), got {raw!r}")
    return arch


CUDA_ARCHS = declare(
    "REVOLTA_CUDA_ARCHS", str, "",
    "Build time: semicolon-separated compute capabilities to compile the native libraries for (e.g. "
    "`70;75;80;86;89;90`): 70/72/75 go into `librevolta_native_sm70.so` (built by a CUDA 11.x/12.x nvcc), 80 and "
    "newer into `librevolta_native.so` (the default nvcc); default the visible GPU's, else reference only.")
VOLTA_NVCC = declare(
    "REVOLTA_VOLTA_NVCC", str, "",
    "Build time: the CUDA 11.x/12.x `nvcc` that builds the Volta library; default the first found of Debian's "
    "`nvidia-cuda-toolkit` (`/usr/lib/nvidia-cuda-toolkit/bin/nvcc`), `/usr/local/cuda-12.*` and "
    "`/usr/local/cuda-11.*`.")
VOLTA_LIB = declare(
    "REVOLTA_VOLTA_LIB", str, "",
    "Build time: an already built `librevolta_native_sm70.so` to package instead of compiling the Volta library.")
EMULATE_ARCH: EnvVar[int | None] = declare(
    "REVOLTA_EMULATE_ARCH", parse_arch, None,
    "`70`: Volta mode on any GPU: load `librevolta_native_sm70.so` (its compute_70 PTX is compiled by the driver) "
    "and make every host-side choice a V100 makes (no fragment-layout attention kernels, no programmatic "
    "dependent launch, fp16 for bf16 checkpoints); to run the code a V100 runs on a newer GPU.")
CUDA_VISIBLE_DEVICES = declare(
    "CUDA_VISIBLE_DEVICES", str, "",
    "Read, never set: the GPUs CUDA will use (indices), so the native library is chosen for the lowest compute "
    "capability among them.")
NATIVE_LIB = declare(
    "REVOLTA_NATIVE_LIB", str, "",
    "Path of a `librevolta_native.so` to load instead of the installed one; a library there that cannot be used "
    "is an error at import.")
DISABLE_NATIVE = declare(
    "REVOLTA_DISABLE_NATIVE", parse_bool, False,
    "`1`: never load the native library; every op runs its pure-torch reference.")
PDL = declare(
    "REVOLTA_PDL", parse_bool, True,
    "`0`: launch the native kernels without programmatic dependent launch (on by default on sm_90+), e.g. to "
    "rule it out while debugging a kernel's ordering.")
