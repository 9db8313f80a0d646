"""``quantization_config`` of an HF config.json, parsed into what the quantized linear layers need."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from revolta_engine.errors import UnsupportedModelError


@dataclass(frozen=True)
class QuantConfig:
    """A weight-only, group-wise integer quantization (AWQ "GEMM" or GPTQ).

    ``group_size`` -1 means one group per output channel (the whole input dimension). ``zero_offset`` is
    added to every stored zero point: GPTQ v1 checkpoints store ``zero - 1``.
    """

    method: str
    bits: int
    group_size: int
    zero_offset: int = 0
    desc_act: bool = False
    modules_to_not_convert: tuple[str, ...] = ()

    def applies_to(self, module_name: str) -> bool:
        """False for modules the checkpoint keeps unquantized (``modules_to_not_convert``)."""
        return not any(skip and skip in module_name for skip in self.modules_to_not_convert)

    def group_for(self, in_features: int) -> int:
        """The group size of a layer with ``in_features`` inputs."""
        return in_features if self.group_size == -1 else self.group_size


def _get(qc: Any, key: str, default: Any = None) -> Any:
    return qc.get(key, default) if isinstance(qc, dict) else getattr(qc, key, default)


def parse_quant_config(hf_config: Any) -> QuantConfig | None:
    """The checkpoint's quantization, or None for an unquantized model; unsupported schemes are rejected."""
    qc = getattr(hf_config, "quantization_config", None)
    if not qc:
        return None
    method = str(_get(qc, "quant_method", "")).lower()
    bits = int(_get(qc, "bits", _get(qc, "w_bit", 0)) or 0)
    group = int(_get(qc, "group_size", _get(qc, "q_group_size", 128)) or 128)
    skip = tuple(_get(qc, "modules_to_not_convert", None) or ())
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
        return QuantConfig("gptq", bits, group, 1 if fmt == "gptq" else 0, desc_act, skip)
    raise UnsupportedModelError(
        f"quantization method {method or '(none)'!r} is not supported; ReVolta loads AWQ (gemm) and GPTQ"
    )
