"""``revolta bench serve``: drive any OpenAI-compatible server and report throughput and latencies."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from revolta_cli.bench.dataset import BenchRequest, add_random_dataset_flags, requests_from_flags
from revolta_cli.bench.report import print_serve_report, summarize, write_result


@dataclass
class RequestResult:
    """What one benchmark request measured (seconds)."""

    success: bool = False
    prompt_len: int = 0
    output_tokens: int = 0
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    latency: float = 0.0
    error: str = ""


def add_parser(subparsers: Any) -> None:
    """Register ``bench serve``."""
    p = subparsers.add_parser("serve", help="load-test an OpenAI-compatible server (like vllm bench serve)")
    p.add_argument("--base-url", default="http://127.0.0.1:8000", help="server URL (without /v1)")
    p.add_argument("--endpoint", default="/v1/completions", choices=["/v1/completions", "/v1/chat/completions"])
    p.add_argument("--model", default=None, help="model name to send (default: the server's first model)")
    p.add_argument("--api-key", default=None)
    add_random_dataset_flags(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokenizer", default=None,
                   help="send text decoded with this tokenizer (HF path) instead of token ids")
    p.add_argument("--request-rate", type=float, default=float("inf"),
                   help="requests per second, Poisson arrivals (inf: send all at once)")
    p.add_argument("--max-concurrency", type=int, default=None, help="most requests in flight")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--percentile-metrics", default="99", help="comma-separated percentiles, e.g. 50,90,99")
    p.add_argument("--result-file", default=None, help="write the result JSON here")
    p.add_argument("--disable-tqdm", action="store_true")
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    """Run the benchmark; 1 if any request failed."""
    tokenizer = None
    if ns.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(ns.tokenizer)
    requests = requests_from_flags(ns, ns.seed, tokenizer)
    percentiles = [float(p) for p in ns.percentile_metrics.split(",") if p.strip()]
    result = asyncio.run(benchmark(ns, requests, percentiles))
    print_serve_report(result, percentiles)
    write_result(ns.result_file, result)
    return 1 if result["failed"] else 0


async def _arrivals(requests: list[BenchRequest], rate: float, seed: int):
    rng = random.Random(seed)
    for req in requests:
        yield req
        if rate != float("inf"):
            await asyncio.sleep(rng.expovariate(rate))


async def benchmark(ns: argparse.Namespace, requests: list[BenchRequest], percentiles: list[float]) -> dict:
    """Send ``requests`` with the configured rate and concurrency; return the result dict."""
    import httpx

    base = ns.base_url.rstrip("/")
    headers = {"Authorization": f"Bearer {ns.api_key}"} if ns.api_key else {}
    limit = ns.max_concurrency or len(requests)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=httpx.Timeout(3600.0, connect=30.0),
                                 limits=httpx.Limits(max_connections=limit + 4,
                                                     max_keepalive_connections=limit + 4)) as http:
        model = ns.model or (await http.get("/v1/models")).json()["data"][0]["id"]
        semaphore = asyncio.Semaphore(limit)
        bar = None
        if not ns.disable_tqdm:
            from tqdm import tqdm

            bar = tqdm(total=len(requests), file=sys.stderr)

        async def limited(req: BenchRequest) -> RequestResult:
            async with semaphore:
                result = await _one_request(http, ns, model, req)
            if bar is not None:
                bar.update(1)
            return result

        start = time.perf_counter()
        tasks = [asyncio.create_task(limited(req)) async for req in _arrivals(requests, ns.request_rate, ns.seed)]
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - start
        if bar is not None:
            bar.close()
    return _result(ns, results, duration, percentiles)


async def _one_request(http: Any, ns: argparse.Namespace, model: str, req: BenchRequest) -> RequestResult:
    body: dict[str, Any] = {"model": model, "max_tokens": req.output_len, "temperature": ns.temperature,
                            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    if ns.endpoint == "/v1/chat/completions":
        text = req.prompt if isinstance(req.prompt, str) else " ".join(map(str, req.prompt))
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = req.prompt
    result = RequestResult(prompt_len=req.prompt_len)
    start = last = time.perf_counter()
    chunks = 0
    try:
        async with http.stream("POST", ns.endpoint, json=body) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {(await response.aread()).decode()[:200]}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                payload = line[6:]
                if payload == "[DONE]":
                    break
                data = json.loads(payload)
                if "error" in data:
                    result.error = data["error"].get("message", "error event")
                    return result
                if data.get("usage"):
                    result.output_tokens = data["usage"]["completion_tokens"]
                    result.prompt_len = data["usage"]["prompt_tokens"]
                choices = data.get("choices") or []
                if not choices:
                    continue
                now = time.perf_counter()
                if chunks == 0:
                    result.ttft = now - start
                else:
                    result.itl.append(now - last)
                last = now
                chunks += 1
        result.latency = time.perf_counter() - start
        result.output_tokens = result.output_tokens or chunks
        result.success = True
    except Exception as exc:  # network errors are results, not crashes
        result.error = f"{type(exc).__name__}: {exc}"
    return result


def _result(ns: argparse.Namespace, results: list[RequestResult], duration: float, percentiles: list[float]
            ) -> dict:
    ok = [r for r in results if r.success]
    total_out = sum(r.output_tokens for r in ok)
    total_in = sum(r.prompt_len for r in ok)
    tpots = [(r.latency - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    errors = [r.error for r in results if not r.success]
    return {
        "date": time.strftime("%Y%m%d-%H%M%S"), "base_url": ns.base_url, "endpoint": ns.endpoint,
        "num_prompts": len(results), "request_rate": ns.request_rate if ns.request_rate != float("inf") else "inf",
        "max_concurrency": ns.max_concurrency, "duration": duration, "completed": len(ok),
        "failed": len(results) - len(ok), "errors": errors[:10], "total_input_tokens": total_in,
        "total_output_tokens": total_out, "request_throughput": len(ok) / duration if duration else 0.0,
        "output_throughput": total_out / duration if duration else 0.0,
        "total_token_throughput": (total_in + total_out) / duration if duration else 0.0,
        "ttft": summarize([r.ttft for r in ok], percentiles), "tpot": summarize(tpots, percentiles),
        "itl": summarize([x for r in ok for x in r.itl], percentiles),
        "e2el": summarize([r.latency for r in ok], percentiles),
        "requests": [asdict(r) | {"itl": None} for r in results],
    }
