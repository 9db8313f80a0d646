"""``revolta serve`` with KV offload: the flags reach the engine, blocks are written as files by the time the
server has stopped, and a restarted server answers a repeated prompt from those files."""

from __future__ import annotations

import json
import re
import signal
import urllib.request

import pytest
from server_process import ServerProcess

from revolta_cli.engine_flags import engine_args_from
from revolta_cli.main import build_parser

PROMPT = "The quick brown fox jumps over the lazy dog. " * 6


def test_offload_flags_reach_engine_args():
    args = engine_args_from(build_parser().parse_args(
        ["serve", "--kv-offloading-size", "2.5", "--kv-offload-path", "/tmp/kv", "--kv-offload-disk-size", "8"]))
    assert (args.kv_offloading_size, args.kv_offload_path, args.kv_offload_disk_size) == (2.5, "/tmp/kv", 8.0)
    assert {"kv_offloading_size", "kv_offload_path", "kv_offload_disk_size"} <= args.explicit
    plain = engine_args_from(build_parser().parse_args(["serve"]))
    assert plain.kv_offloading_size is None and plain.kv_offload_path is None


def _complete(server: ServerProcess) -> dict:
    body = json.dumps({"model": "tiny", "prompt": PROMPT, "max_tokens": 4, "temperature": 0}).encode()
    req = urllib.request.Request(server.url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def _metric(server: ServerProcess, name: str) -> float:
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    match = re.search(rf"^{re.escape(name)}(?:_total)?{{[^}}]*}} (\S+)$", text, re.M)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


@pytest.mark.slow
def test_offloaded_blocks_survive_a_server_restart(tiny_model, tmp_path):
    args = [str(tiny_model), "--served-model-name", "tiny", "--max-model-len", "256", "--kv-cache-memory-bytes",
            str(8 << 20), "--kv-offload-path", str(tmp_path), "--kv-offload-disk-size", "0.5"]
    first = ServerProcess(*args, startup_timeout=120)
    try:
        answer = _complete(first)["choices"][0]["text"]
        assert "KV offload: files under" in first.text
    finally:
        assert first.stop(signal.SIGINT) == 0
    files = list(tmp_path.rglob("*.kvblock"))
    assert files and not list(tmp_path.rglob("*.tmp"))

    second = ServerProcess(*args, startup_timeout=120)
    try:
        assert f"({len(files)} blocks kept from earlier runs)" in second.text
        again = _complete(second)
        assert again["choices"][0]["text"] == answer
        assert _metric(second, "revolta:external_prefix_cache_hits") > 0
        assert _metric(second, "revolta:prefix_cache_hits") == 0
    finally:
        assert second.stop(signal.SIGINT) == 0
