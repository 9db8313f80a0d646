"""``revolta doctor``: what this machine offers ReVolta and what the engine would choose."""

from __future__ import annotations

import argparse
import platform
import sys
from typing import Any

from revolta_cli import doctor_kernels


def add_parser(subparsers: Any) -> None:
    """Register ``doctor``."""
    p = subparsers.add_parser("doctor", help="check Python, torch, CUDA toolkits and driver, GPUs and the kernels")
    p.set_defaults(func=run)


def _line(name: str, value: object) -> None:
    print(f"  {name:<24} {value}")


def run(ns: argparse.Namespace) -> int:
    """Print the report; exit 0 (it diagnoses, it does not judge)."""
    print("ReVolta doctor")
    _line("python", f"{platform.python_version()} ({sys.executable})")
    _line("platform", platform.platform())
    try:
        import torch
    except ImportError as exc:
        _line("torch", f"not importable: {exc}")
        return 1
    _line("torch", f"{torch.__version__} (CUDA build: {torch.version.cuda or 'none'})")
    _line("cpu threads", torch.get_num_threads())
    if torch.cuda.is_available():
        _line("CUDA devices", torch.cuda.device_count())
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            _line(f"  cuda:{i}", f"{props.name}, compute capability {props.major}.{props.minor}, "
                               f"{props.total_memory / 2**30:.1f} GiB")
    else:
        _line("CUDA devices", "none visible (the engine runs on the CPU)")
    _interconnect(torch)
    try:
        doctor_kernels.report(_line)
    except Exception as exc:  # report, do not crash: that is the point of doctor
        _line("revolta-kernels", f"not usable: {exc}")
    _profile()
    return 0


def _interconnect(torch: Any) -> None:
    """What tensor parallelism can use: the collective backends, and which GPUs reach each other directly."""
    import torch.distributed as dist

    backends = [name for name, ok in (("nccl", dist.is_available() and dist.is_nccl_available()),
                                      ("gloo", dist.is_available() and dist.is_gloo_available())) if ok]
    _line("collectives", ", ".join(backends) or "none (torch.distributed is unavailable)")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count > 1:
        for i in range(count):
            peers = [j for j in range(count) if j != i and torch.cuda.can_device_access_peer(i, j)]
            _line(f"  cuda:{i} peer access", ", ".join(f"cuda:{j}" for j in peers) or "none (copies go through the host)")
        _line("tensor parallelism", f"up to {count} GPUs (--tensor-parallel-size)")
    else:
        _line("tensor parallelism", "CPU processes over gloo" + (" (one GPU visible)" if count == 1 else ""))


def _profile() -> None:
    try:
        import torch

        from revolta_engine.config import choose_dtype, resolve_device

        device = resolve_device("auto")
        dtype, source = choose_dtype("auto", torch.float16, device)
        print("What the engine would choose (default model, no flags):")
        _line("device", device)
        _line("dtype", f"{str(dtype).removeprefix('torch.')} ({source})")
        _line("max_num_batched_tokens", 2048 if device.type == "cpu" else 8192)
    except Exception as exc:
        _line("profile", f"could not be resolved: {exc}")
    try:
        from revolta_engine import default_model

        _line("default model", default_model())
    except Exception as exc:
        _line("default model", f"missing: {exc}")
