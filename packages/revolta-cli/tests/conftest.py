"""Servers shared by the CLI/API end-to-end tests: SmolLM2 (real answers) and a tiny random model (volume)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from server_process import ServerProcess, pid_alive, wait_until  # noqa: E402
from tiny_model import make_tiny_llama  # noqa: E402

SMOL_NAME = "SmolLM2-135M-Instruct"
# 512-token context and a 256 MiB KV cache: room for 64 short requests at once, small enough to load fast.
SMOL_ARGS = ("--max-model-len", "512", "--kv-cache-memory-bytes", str(256 << 20), "--disable-uvicorn-access-log",
             "--trust-request-chat-template")


@pytest.fixture(scope="session")
def smol_server():
    """``revolta serve`` with no model argument (the embedded SmolLM2)."""
    server = ServerProcess(*SMOL_ARGS)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A tiny random Llama checkpoint directory."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_server(tiny_model):
    """``revolta serve`` over the tiny model (64-token context)."""
    server = ServerProcess(str(tiny_model), "--served-model-name", "tiny", "--max-model-len", "64",
                           "--max-num-seqs", "32", "--kv-cache-memory-bytes", str(8 << 20),
                           "--disable-uvicorn-access-log", startup_timeout=120)
    children = server.children()
    yield server
    # Ctrl-C stops the server cleanly: exit code 0 and no engine process left behind.
    assert server.stop(signal.SIGINT) == 0
    assert wait_until(lambda: not any(pid_alive(p) for p in children), timeout=15)
