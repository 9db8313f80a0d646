"""Kernel launch overrides that the kernel benchmarks take as command-line arguments.

They change process-wide launch parameters of the native quantized GEMM / GEMV kernels for a measurement (a
swept block shape, int8 activations), never for serving. Every override goes through :func:`apply`, the one
place these benchmarks call the kernels' tuning functions.
"""

from __future__ import annotations

import argparse

from revolta_kernels import native_quant


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``--quant-tune``, ``--dense-tune``, ``--dense-norm-variant`` and ``--int8-activations`` options."""
    ap.add_argument("--quant-tune", default="", metavar="NAME=V,...",
                    help="quantized GEMM/GEMV launch overrides as keyword arguments of the tuning function "
                         "(e.g. gemv_warps=8,gemv_rows=4); default: the built-in plan")
    ap.add_argument("--dense-tune", default="", metavar="WARPS,ROWS",
                    help="block shape of the skinny fp16 GEMV (e.g. 8,4); default: the built-in one")
    ap.add_argument("--dense-norm-variant", default="", metavar="V[,WARPS,ROWS]",
                    help="the fused add + RMSNorm fp16 GEMV's variant and block shape; default: the built-in one")
    ap.add_argument("--int8-activations", action="store_true",
                    help="the skinny quantized kernels round their activations to int8 (dp4a dot products)")


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


def apply(args: argparse.Namespace) -> dict[str, object]:
    """Apply the overrides ``args`` names (from :func:`add_arguments`) and return them, for the result JSON."""
    applied: dict[str, object] = {}
    # Tuning call site: revolta_kernels' tuning functions (re-exported by native_quant), the only ones used here.
    if args.quant_tune:
        applied["quant_tune"] = kw = parse_keywords(args.quant_tune)
        native_quant.tune(**kw)
    if args.dense_tune:
        applied["dense_tune"] = shape = parse_ints(args.dense_tune)
        native_quant.dense_tune(*shape)
    if args.dense_norm_variant:
        applied["dense_norm_variant"] = variant = parse_ints(args.dense_norm_variant)
        native_quant.dense_norm_variant(*variant)
    if args.int8_activations:
        applied["int8_activations"] = True
        native_quant.set_int8_activations(True)
    return applied
