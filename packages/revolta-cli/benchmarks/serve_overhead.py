"""Serving overhead: ``revolta bench serve`` at fixed concurrency vs offline ``LLM.generate``, same prompts.

Runs, in one go: the offline throughput bench (engine in this machine's process, batch limited to the same
concurrency), then ``revolta serve`` + ``revolta bench serve`` with the same random prompts and lengths.
Prints a table and writes JSON. Usage:

    uv run python packages/revolta-cli/benchmarks/serve_overhead.py --num-prompts 32 --input-len 128 \
        --output-len 64 --concurrency 16 [--model PATH] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REVOLTA = [sys.executable, "-m", "revolta_cli.main"]


def _serve(engine_flags: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([*REVOLTA, "serve", "--port", "0", "--disable-uvicorn-access-log", *engine_flags],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found = threading.Event()
    url: list[str] = []

    def drain() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            match = re.search(r"Serving the OpenAI-compatible API at (http://\S+)/v1", line)
            if match and not found.is_set():
                url.append(match.group(1))
                found.set()
        found.set()

    threading.Thread(target=drain, daemon=True).start()
    found.wait(600)
    if not url:
        proc.kill()
        raise RuntimeError("revolta serve did not start")
    return proc, url[0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None)
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--max-model-len", type=int, default=1024)
    p.add_argument("--out", default=None)
    ns = p.parse_args()
    engine_flags = ([ns.model] if ns.model else []) + ["--max-model-len", str(ns.max_model_len),
                                                       "--max-num-seqs", str(ns.concurrency)]
    lengths = ["--num-prompts", str(ns.num_prompts), "--random-input-len", str(ns.input_len),
               "--random-output-len", str(ns.output_len)]
    with tempfile.TemporaryDirectory() as tmp:
        offline_json, serve_json = Path(tmp) / "offline.json", Path(tmp) / "serve.json"
        offline_cmd = [*REVOLTA, "bench", "throughput", *engine_flags, *lengths, "--output-json", str(offline_json)]
        print("$", " ".join(offline_cmd[2:]), flush=True)
        subprocess.run(offline_cmd, check=True)
        proc, url = _serve(engine_flags)
        try:
            serve_cmd = [*REVOLTA, "bench", "serve", "--base-url", url, *lengths, "--max-concurrency",
                         str(ns.concurrency), "--result-file", str(serve_json), "--disable-tqdm"]
            print("$ revolta serve", " ".join(engine_flags), flush=True)
            print("$", " ".join(serve_cmd[2:]), flush=True)
            subprocess.run(serve_cmd, check=True)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        offline, serve = json.loads(offline_json.read_text()), json.loads(serve_json.read_text())
    ratio = serve["output_throughput"] / offline["output_throughput"]
    print(f"\n{'':24}{'output tok/s':>14}{'total tok/s':>14}{'req/s':>10}")
    print(f"{'offline LLM.generate':24}{offline['output_throughput']:>14.2f}{offline['total_token_throughput']:>14.2f}"
          f"{offline['request_throughput']:>10.3f}")
    print(f"{'bench serve (c=' + str(ns.concurrency) + ')':24}{serve['output_throughput']:>14.2f}"
          f"{serve['total_token_throughput']:>14.2f}{serve['request_throughput']:>10.3f}")
    print(f"serve / offline output tokens/s: {ratio:.1%}")
    if ns.out:
        Path(ns.out).write_text(json.dumps({"offline": offline, "serve": {k: v for k, v in serve.items()
                                                                          if k != "requests"},
                                            "ratio": ratio, "args": vars(ns)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
