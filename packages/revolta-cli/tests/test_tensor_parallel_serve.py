"""``revolta serve --tensor-parallel-size 2`` on the CPU: the workers serve with the engine core, answer as one
rank does, leave with the server, and a worker that dies takes the engine down loudly instead of hanging it."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request

import pytest
from server_process import ServerProcess, pid_alive, wait_until

from revolta_engine import LLM, SamplingParams

PROMPT = "The quick brown fox"
ARGS = ("--served-model-name", "tiny", "--max-model-len", "64", "--kv-cache-memory-bytes", str(8 << 20))


def _complete(server: ServerProcess) -> dict:
    body = json.dumps({"model": "tiny", "prompt": PROMPT, "max_tokens": 6, "temperature": 0}).encode()
    req = urllib.request.Request(server.url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    children = [int(p) for p in out.stdout.split()]
    return children + [d for c in children for d in _descendants(c)]


def _workers(server: ServerProcess) -> list[int]:
    """The tensor-parallel worker processes (children of the engine core running the worker entry point)."""
    found = []
    for pid in _descendants(server.proc.pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode()
        except FileNotFoundError:
            continue
        if "multiprocessing" in cmd and "resource_tracker" not in cmd and _parent(pid) != server.proc.pid:
            found.append(pid)
    return found


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().split(") ")[-1].split()[1])


@pytest.mark.slow
def test_two_rank_server_answers_as_one_rank_and_stops_cleanly(tiny_model):
    with LLM(str(tiny_model), max_model_len=64, kv_cache_memory_bytes=8 << 20) as llm:
        expected = llm.generate([PROMPT], SamplingParams(max_tokens=6, temperature=0))[0].outputs[0].text
    server = ServerProcess(str(tiny_model), *ARGS, "--tensor-parallel-size", "2", startup_timeout=120)
    try:
        workers = _workers(server)
        assert len(workers) == 1, server.text
        assert "Tensor parallelism over 2 ranks (gloo)" in server.text
        assert _complete(server)["choices"][0]["text"] == expected
    finally:
        assert server.stop(signal.SIGINT) == 0
    assert wait_until(lambda: not any(pid_alive(p) for p in workers), timeout=30)


@pytest.mark.slow
def test_dead_worker_stops_the_engine_loudly(tiny_model):
    server = ServerProcess(str(tiny_model), *ARGS, "-tp", "2", startup_timeout=120)
    try:
        (worker,) = _workers(server)
        subprocess.run(["kill", "-9", str(worker)], check=True)
        assert wait_until(lambda: "process died" in server.text, timeout=30), server.text
        with pytest.raises(urllib.error.HTTPError) as err:
            _complete(server)
        assert err.value.code >= 500
    finally:
        server.stop(signal.SIGINT)
    assert "tensor-parallel rank 1's process died" in server.text
