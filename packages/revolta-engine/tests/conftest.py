"""Shared fixtures: tiny random checkpoints (built once per session) and engines over them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
# The benchmarks' shared code (``from common import oracle``), as ``python benchmarks/NAME.py`` sees it: the
# oracle proposer the speculative-decoding benchmark drives is tested here.
sys.path.append(str(Path(__file__).resolve().parents[3] / "benchmarks"))

from checkpoints import make_tiny_checkpoint  # noqa: E402

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> dict[str, Path]:
    """One tiny random checkpoint per supported family."""
    root = tmp_path_factory.mktemp("ckpt")
    return {arch: make_tiny_checkpoint(root / arch, arch) for arch in ("llama", "qwen2", "qwen3")}


@pytest.fixture(scope="session")
def tiny_llama(tiny_checkpoints) -> Path:
    return tiny_checkpoints["llama"]
