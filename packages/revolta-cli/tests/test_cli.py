"""The `revolta` commands: doctor, generate, chat, bench, and serve's auth, shutdown and engine-death paths."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys

import httpx
import openai
import pytest
from server_process import ServerProcess, pid_alive, wait_until


def revolta(*args: str, stdin: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "revolta_cli.main", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def _tiny_args(tiny_model, *extra: str) -> list[str]:
    return [str(tiny_model), "--served-model-name", "tiny", "--max-model-len", "256",
            "--kv-cache-memory-bytes", str(8 << 20), *extra]


def test_doctor_reports_the_toolchain():
    result = revolta("doctor")
    assert result.returncode == 0, result.stderr
    for word in ("python", "torch", "CUDA devices", "revolta-kernels", "dtype", "collectives", "tensor parallelism"):
        assert word in result.stdout


def test_no_command_prints_help():
    result = revolta()
    assert result.returncode == 2 and "serve" in result.stdout


def test_generate_locally_matches_the_offline_engine_and_the_server(tiny_model, tiny_server):
    from revolta_engine import LLM, SamplingParams

    llm = LLM(str(tiny_model), max_model_len=64, kv_cache_memory_bytes=8 << 20)
    expected = llm.generate("Hello world", SamplingParams(temperature=0, max_tokens=6))[0].outputs[0].text
    local = revolta("generate", "Hello world", str(tiny_model), "--max-model-len", "64", "--max-tokens", "6",
                    "--temperature", "0", "--kv-cache-memory-bytes", str(8 << 20))
    assert local.returncode == 0, local.stderr
    assert local.stdout == expected + "\n"
    remote = revolta("generate", "Hello world", "--url", tiny_server.url, "--max-tokens", "6", "--temperature", "0")
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout == expected + "\n"


@pytest.mark.parametrize(("method", "bits", "act_order", "load_format"),
                         [("awq", 4, False, "safetensors"), ("gptq", 8, True, "dummy")])
def test_generate_locally_with_a_quantized_checkpoint(tiny_model, tmp_path, method, bits, act_order,
                                                      load_format):
    """`revolta generate` starts on an AWQ / GPTQ directory (tokenizer copied by the RTN quantizer), with its
    weights or dummy ones, and prints what the offline engine gives."""
    from revolta_engine import LLM, SamplingParams
    from revolta_engine.quantize import quantize_checkpoint

    quant = quantize_checkpoint(tiny_model, tmp_path / method, method, bits, 32, act_order=act_order)
    kw = dict(max_model_len=64, kv_cache_memory_bytes=8 << 20, load_format=load_format)
    expected = LLM(str(quant), **kw).generate("Hello world", SamplingParams(temperature=0, max_tokens=6))
    local = revolta("generate", "Hello world", str(quant), "--max-model-len", "64", "--max-tokens", "6",
                    "--temperature", "0", "--kv-cache-memory-bytes", str(8 << 20), "--load-format", load_format)
    assert local.returncode == 0, local.stderr
    assert local.stdout == expected[0].outputs[0].text + "\n"


def test_chat_against_a_url_streams_answers(tiny_server):
    result = revolta("chat", "--url", tiny_server.url, "--max-tokens", "4", "--temperature", "0",
                     stdin="Hello\n/reset\nHow are you?\n/exit\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("> ") >= 3


def test_bench_serve_reports_and_writes_json(tiny_server, tmp_path):
    out = tmp_path / "bench.json"
    result = revolta("bench", "serve", "--base-url", tiny_server.url, "--num-prompts", "8", "--random-input-len", "16",
                     "--random-output-len", "4", "--random-token-range", "3", "300", "--max-concurrency", "4",
                     "--result-file", str(out), "--disable-tqdm")
    assert result.returncode == 0, result.stdout + result.stderr
    for section in ("Serving Benchmark Result", "Output token throughput (tok/s):", "Time to First Token",
                    "Time per Output Token", "Inter-token Latency", "End-to-end Latency", "P99 TTFT (ms):"):
        assert section in result.stdout
    data = json.loads(out.read_text())
    assert data["completed"] == 8 and data["failed"] == 0
    assert data["total_output_tokens"] == 32 and data["total_input_tokens"] == 8 * 16
    assert data["ttft"]["mean"] > 0 and data["output_throughput"] > 0


def test_bench_serve_poisson_rate(tiny_server, tmp_path):
    result = revolta("bench", "serve", "--base-url", tiny_server.url, "--num-prompts", "6", "--random-input-len", "8",
                     "--random-output-len", "3", "--random-token-range", "3", "300", "--request-rate", "20",
                     "--disable-tqdm", "--endpoint", "/v1/chat/completions")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^Successful requests:\s+6\s*$", result.stdout, re.MULTILINE), result.stdout


def test_bench_throughput_offline(tiny_model, tmp_path):
    out = tmp_path / "tp.json"
    result = revolta("bench", "throughput", str(tiny_model), "--max-model-len", "64", "--num-prompts", "4",
                     "--random-input-len", "8", "--random-output-len", "4", "--random-token-range", "3", "300",
                     "--kv-cache-memory-bytes", str(8 << 20), "--output-json", str(out))
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text())["total_output_tokens"] == 16


def test_bench_latency_offline(tiny_model, tmp_path):
    out = tmp_path / "latency.json"
    result = revolta("bench", "latency", str(tiny_model), "--max-model-len", "64", "--batch-size", "3",
                     "--input-len", "8", "--output-len", "5", "--num-iters-warmup", "1", "--num-iters", "3",
                     "--random-token-range", "3", "300", "--kv-cache-memory-bytes", str(8 << 20),
                     "--output-json", str(out))
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    assert len(data["latencies"]) == 3 and data["avg_latency"] > 0
    assert min(data["latencies"]) <= data["percentiles"]["50"] <= max(data["latencies"])
    assert "Avg latency:" in result.stdout and "90% percentile latency" in result.stdout


def test_api_key_then_engine_death_then_sigterm(tiny_model):
    """One server (each start costs seconds): auth, then the core dies mid-stream, then SIGTERM stops it."""
    server = ServerProcess(*_tiny_args(tiny_model, "--api-key", "s3cret", "--allowed-origins",
                                       '["https://chat.example"]'), startup_timeout=120,
                           env={"REVOLTA_LOG_STATS_INTERVAL": "0.5"})
    try:
        children = server.children()
        _check_api_key(server)
        _check_engine_death(server, children)
    finally:
        code = server.stop(signal.SIGTERM)
    assert code == 0
    assert wait_until(lambda: not any(pid_alive(p) for p in children), timeout=15)
    assert "revolta serve: stopped" in server.text


def _check_api_key(server: ServerProcess) -> None:
    r = httpx.get(server.url + "/v1/models")
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(server.url + "/v1/models", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert httpx.post(server.url + "/tokenize", json={"prompt": "x"}).status_code == 401
    assert httpx.get(server.url + "/v1/models", headers={"x-api-key": "s3cret"}).status_code == 200
    assert httpx.get(server.url + "/health").status_code == 200
    assert httpx.get(server.url + "/ping").status_code == 200 and httpx.post(server.url + "/ping").status_code == 200
    assert httpx.get(server.url + "/metrics").status_code == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()
    good = openai.OpenAI(base_url=server.url + "/v1", api_key="s3cret", max_retries=0)
    assert good.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                        max_tokens=2).choices
    # the stats line vLLM users read in the log, after a busy interval
    assert wait_until(lambda: "Avg generation throughput" in server.text, timeout=10), server.text[-2000:]
    # A browser page of the one allowed origin (CORS): the preflight needs no key, and a 401 still carries the
    # headers that let the page read it; a page of another origin gets no CORS approval.
    def preflight(origin: str) -> httpx.Response:
        return httpx.options(server.url + "/v1/chat/completions", headers={
            "Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"})

    pre = preflight("https://chat.example")
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "https://chat.example"
    denied = httpx.get(server.url + "/v1/models", headers={"Origin": "https://chat.example"})
    assert denied.status_code == 401 and denied.headers["access-control-allow-origin"] == "https://chat.example"
    assert "access-control-allow-origin" not in preflight("https://evil.example").headers


def _check_engine_death(server: ServerProcess, children: list[int]) -> None:
    auth = {"Authorization": "Bearer s3cret"}
    core = next(p for p in children if "resource_tracker" not in _cmdline(p))
    body = {"model": "tiny", "prompt": "Hello", "max_tokens": 240, "ignore_eos": True, "stream": True}
    events = []
    with httpx.stream("POST", server.url + "/v1/completions", json=body, headers=auth, timeout=60) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line:
                continue
            events.append(line)
            if len(events) == 1:
                os.kill(core, signal.SIGKILL)
    assert events[-1] == "data: [DONE]"
    error = json.loads(events[-2][6:])["error"]
    assert error["type"] == "server_error" and "engine" in error["message"]
    assert wait_until(lambda: httpx.get(server.url + "/health").status_code == 503, timeout=10)
    assert httpx.post(server.url + "/ping").status_code == 503
    r = httpx.post(server.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 1},
                   headers=auth)
    assert r.status_code == 503 and r.json()["error"]["type"] == "server_error"


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


def _self_signed(tmp_path) -> tuple[str, str]:
    """A key and a certificate for 127.0.0.1 made with the openssl command."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                           "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                           "-addext", "subjectAltName=IP:127.0.0.1"], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    return str(key), str(cert)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_https_and_vllm_flags_that_change_nothing_here(tiny_model, tmp_path):
    key, cert = _self_signed(tmp_path)
    for bad, message in ((["--ssl-keyfile", key], "needs both"),
                         (["--ssl-keyfile", cert, "--ssl-certfile", cert], "cannot use --ssl-certfile")):
        result = revolta("serve", str(tiny_model), *bad)
        assert result.returncode == 2 and message in result.stderr, result.stderr
    server = ServerProcess(*_tiny_args(tiny_model, "--ssl-keyfile", key, "--ssl-certfile", cert,
                                       "--attention-backend", "FLASH_ATTN_V100", "--swap-space", "4",
                                       "--disable-custom-all-reduce", "--enable-force-include-usage",
                                       "--default-chat-template-kwargs", '{"unused": 1}'), startup_timeout=120)
    try:
        assert server.url.startswith("https://127.0.0.1:")
        reply = httpx.post(server.url + "/v1/completions", verify=ssl.create_default_context(cafile=cert),
                           json={"model": "tiny", "prompt": "hi", "max_tokens": 2})
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 2
        with httpx.stream("POST", server.url + "/v1/completions", verify=ssl.create_default_context(cafile=cert),
                          json={"model": "tiny", "prompt": "hi", "max_tokens": 2, "stream": True}) as stream:
            events = [line for line in stream.iter_lines() if line.startswith("data: {")]
        assert '"usage":{"prompt_tokens"' in events[-1]  # --enable-force-include-usage, without stream_options
        with pytest.raises(httpx.ConnectError):  # a client that does not trust this certificate is refused
            httpx.get(server.url + "/health")
        with pytest.raises(httpx.RemoteProtocolError):  # and plain HTTP is not served
            httpx.get(server.url.replace("https://", "http://") + "/health")
        for flag in ("--attention-backend FLASH_ATTN_V100 has no effect", "--swap-space has no effect",
                     "--disable-custom-all-reduce has no effect"):
            assert flag in server.text
    finally:
        assert server.stop() == 0
