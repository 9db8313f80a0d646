"""Fixtures: the engine tests' tiny random checkpoints (built offline with transformers), shared here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ENGINE_TESTS = Path(__file__).resolve().parents[2] / "revolta-engine" / "tests"
sys.path.insert(0, str(ENGINE_TESTS))

from checkpoints import make_tiny_checkpoint  # noqa: E402

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "llama", "llama")
