"""Kernel launch overrides and per-call kernel options that the kernel benchmarks take as command-line arguments.

The overrides change process-wide launch parameters of the native quantized GEMM / GEMV kernels for a
measurement (a swept block shape), never for serving; every override goes through :func:`apply`, the one place
these benchmarks turn arguments into calls of :mod:`revolta_kernels.tuning`. ``--int8-activations`` is no
launch override: it is the ``int8_activations`` argument of each quantized op call, which the benchmarks pass
from :func:`int8_activations`.
"""

from __future__ import annotations

import argparse

from revolta_kernels import tuning as kernel_tuning


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``--quant-tune``, ``--dense-tune`` and ``--int8-activations`` options."""
    ap.add_argument("--quant-tune", default="", metavar="NAME=V,...",
                    help="quantized GEMM/GEMV launch overrides as keyword arguments of quant_tune "
                         "(e.g. gemv_warps=8,gemv_rows=4); default: the built-in plan")
    ap.add_argument("--dense-tune", default="", metavar="WARPS,ROWS",
                    help="block shape of the skinny fp16 GEMV (e.g. 8,4); default: the built-in one")
    ap.add_argument("--int8-activations", action="store_true",
                    help="the quantized ops' calls of at most 8 rows round their activations to int8 "
                         "(dp4a dot products)")


def parse_keywords(spec: str) -> dict[str, int]:
    """``"a=1,b=2"`` -> ``{"a": 1, "b": 2}``; an empty text gives no overrides."""
    out = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"expected NAME=VALUE, got {item!r}")
        out[name.strip()] = int(value)
    return out


def parse_ints(spec: str) -> list[int]:
    """``"8,4"`` -> ``[8, 4]``; an empty text gives an empty list."""
    return [int(v) for v in spec.split(",") if v.strip()]


def int8_activations(args: argparse.Namespace) -> bool:
    """The ``int8_activations`` argument of the quantized op calls that ``args`` asks for."""
    return bool(args.int8_activations)


def apply(args: argparse.Namespace) -> dict[str, object]:
    """Apply the overrides ``args`` names (from :func:`add_arguments`) and return them with the per-call options,
    for the result JSON."""
    applied: dict[str, object] = {}
    if args.quant_tune:
        applied["quant_tune"] = kw = parse_keywords(args.quant_tune)
        kernel_tuning.quant_tune(**kw)
    if args.dense_tune:
        applied["dense_tune"] = shape = parse_ints(args.dense_tune)
        kernel_tuning.dense_tune(*shape)
    if int8_activations(args):
        applied["int8_activations"] = True
    return applied
