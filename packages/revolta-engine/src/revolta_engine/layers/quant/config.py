"""``quantization_config`` of an HF config.json, parsed into what the quantized linear layers need."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from revolta_engine.errors import UnsupportedModelError


@dataclass(frozen=True)
class QuantConfig:
    """A weight-only, group-wise integer quantization (AWQ "GEMM" or GPTQ).

    ``group_size`` -1 means one group per output channel (the whole input dimension). ``zero_offset`` is
    added to every stored zero point: GPTQ v1 checkpoints store ``zero - 1``. ``dynamic`` holds GPTQModel's
    per-module rules in order: ``(pattern, None)`` keeps matching modules unquantized (a ``-:`` key),
    ``(pattern, overrides)`` changes ``bits`` / ``group_size`` / ``desc_act`` for them (a ``+:`` or plain key).
    """

    method: str
    bits: int
    group_size: int
    zero_offset: int = 0
    desc_act: bool = False
    modules_to_not_convert: tuple[str, ...] = ()
    dynamic: tuple[tuple[str, tuple[tuple[str, Any], ...] | None], ...] = ()

    def applies_to(self, module_name: str) -> bool:
        """False for modules the checkpoint keeps unquantized (``modules_to_not_convert``, ``-:`` rules)."""
        return self.for_module(module_name) is not None

    def for_module(self, module_name: str) -> QuantConfig | None:
        """This module's quantization (``module_name`` as the checkpoint names it, e.g.
        ``model.layers.3.mlp.down_proj``), or None where the checkpoint keeps it unquantized."""
        if any(skip and skip in module_name for skip in self.modules_to_not_convert):
            return None
        for pattern, overrides in self.dynamic:
            if re.match(pattern, module_name):
                return None if overrides is None else _overridden(self, dict(overrides), module_name)
        return self

    def group_for(self, in_features: int) -> int:
        """The group size of a layer with ``in_features`` inputs."""
        return in_features if self.group_size == -1 else self.group_size


def _overridden(base: QuantConfig, overrides: dict[str, Any], module_name: str) -> QuantConfig:
    """``base`` with a ``dynamic`` rule's bits / group_size / desc_act (other keys change nothing we store)."""
    bits = int(overrides.get("bits", base.bits))
    group = int(overrides.get("group_size", base.group_size))
    if bits not in (4, 8) or (group != -1 and (group <= 0 or group % 8)):
        raise UnsupportedModelError(
            f"quantization_config.dynamic gives {module_name} {bits} bits with group_size {group}; "
            "GPTQ layers need 4 or 8 bits and a group size that is a multiple of 8 or -1")
    return replace(base, bits=bits, group_size=group, desc_act=bool(overrides.get("desc_act", base.desc_act)),
                   dynamic=())


def _parse_dynamic(raw: Any) -> tuple[tuple[str, tuple[tuple[str, Any], ...] | None], ...]:
    """GPTQModel's ``dynamic`` dict -> ordered rules; a pattern that is not a valid regex is rejected here."""
    if not raw:
        return ()
    if not isinstance(raw, dict):
        raise UnsupportedModelError("quantization_config.dynamic must map module patterns to settings")
    rules: list[tuple[str, tuple[tuple[str, Any], ...] | None]] = []
    for key, value in raw.items():
        negative = key.startswith("-:")
        pattern = key[2:] if key.startswith(("-:", "+:")) else key
        try:
            re.compile(pattern)
        except re.error as e:
            raise UnsupportedModelError(f"quantization_config.dynamic pattern {key!r} is not a regex: {e}") from None
        rules.append((pattern, None if negative else tuple(sorted(dict(value or {}).items()))))
    return tuple(rules)


def _get(qc: Any, key: str, default: Any = None) -> Any:
    return qc.get(key, default) if isinstance(qc, dict) else getattr(qc, key, default)


def parse_quant_config(hf_config: Any) -> QuantConfig | None:
    """The checkpoint's quantization, or None for an unquantized model; unsupported schemes are rejected."""
    qc = getattr(hf_config, "quantization_config", None)
    if not qc:
        return None
    method = str(_get(qc, "quant_method", "")).lower()
    bits = int(_get(qc, "bits", _get(qc, "w_bit", 0)) or 0)
    raw_group = _get(qc, "group_size", _get(qc, "q_group_size", None))
    group = 128 if raw_group is None else int(raw_group)  # unset: the quantizers' 128; 0 is refused below
    skip = tuple(_get(qc, "modules_to_not_convert", None) or ())
    if _get(qc, "lm_head", False):
        raise UnsupportedModelError(f"{method or 'this'} checkpoint quantizes lm_head (lm_head: true), which is not "
                                    "supported: the output projection must stay 16-bit")
    if group != -1 and (group <= 0 or group % 8):
        raise UnsupportedModelError(f"quantization group_size {group} is not supported (use a multiple of 8 or -1)")
    if method == "awq":
        version = str(_get(qc, "version", "gemm")).lower()
        if version != "gemm":
            raise UnsupportedModelError(f"AWQ version {version!r} is not supported; only the 'gemm' format is")
        if bits != 4:
            raise UnsupportedModelError(f"AWQ with {bits} bits is not supported; only 4-bit AWQ is")
        if not _get(qc, "zero_point", True):
            raise UnsupportedModelError("AWQ without zero points (zero_point=false) is not supported")
        return QuantConfig("awq", 4, group, 0, False, skip)
    if method == "gptq":
        if bits not in (4, 8):
            raise UnsupportedModelError(f"GPTQ with {bits} bits is not supported; use 4 or 8 bits")
        fmt = str(_get(qc, "checkpoint_format", "gptq")).lower()
        if fmt not in ("gptq", "gptq_v2"):
            raise UnsupportedModelError(f"GPTQ checkpoint_format {fmt!r} is not supported")
        desc_act = bool(_get(qc, "desc_act", False))
        return QuantConfig("gptq", bits, group, 1 if fmt == "gptq" else 0, desc_act, skip,
                           _parse_dynamic(_get(qc, "dynamic", None)))
    raise UnsupportedModelError(
        f"quantization method {method or '(none)'!r} is not supported; ReVolta loads AWQ (gemm) and GPTQ"
    )
