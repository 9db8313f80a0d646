"""Prometheus metrics with vLLM's names under a ``revolta:`` prefix.

Engine state (running/waiting requests, KV usage, token and prefix-cache counters, preemptions) is read from
the client's latest statistics at scrape time; latencies and finish reasons are observed per request here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from revolta_api.engine_client import StatsSnapshot
from revolta_engine.outputs import RequestOutput

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0)
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                240.0, 480.0, 960.0, 1920.0, 7680.0)


class _EngineStatsCollector(Collector):
    def __init__(self, stats: Callable[[], StatsSnapshot], model_name: str) -> None:
        self._stats = stats
        self._model = model_name

    def collect(self) -> Iterable[Metric]:
        s = self._stats()
        labels = ["model_name"]
        for name, doc, value in (
            ("revolta:num_requests_running", "Number of requests in the running batch.", s.num_running),
            ("revolta:num_requests_waiting", "Number of requests waiting to be scheduled.", s.num_waiting),
            ("revolta:kv_cache_usage_perc", "KV cache usage (1 = full).", s.kv_cache_usage),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=labels)
            gauge.add_metric([self._model], float(value))
            yield gauge
        for name, doc, value in (
            ("revolta:prompt_tokens", "Prompt tokens processed.", s.num_prompt_tokens),
            ("revolta:generation_tokens", "Tokens generated.", s.num_generation_tokens),
            ("revolta:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", s.prefix_cache_queries),
            ("revolta:prefix_cache_hits", "Prompt tokens found in the prefix cache.", s.prefix_cache_hits),
            ("revolta:external_prefix_cache_queries", "Prompt tokens looked up in the KV offload tiers.",
             s.external_prefix_cache_queries),
            ("revolta:external_prefix_cache_hits", "Prompt tokens found in the KV offload tiers.",
             s.external_prefix_cache_hits),
            ("revolta:num_preemptions", "Requests preempted to free KV cache.", s.num_preemptions),
            ("revolta:spec_decode_num_drafts", "Speculative verification steps that carried drafts.",
             s.spec_decode_num_drafts),
            ("revolta:spec_decode_num_draft_tokens", "Draft tokens proposed.", s.spec_decode_num_draft_tokens),
            ("revolta:spec_decode_num_accepted_tokens", "Draft tokens accepted.", s.spec_decode_num_accepted_tokens),
        ):
            counter = CounterMetricFamily(name, doc, labels=labels)
            counter.add_metric([self._model], float(value))
            yield counter
        per_pos = CounterMetricFamily("revolta:spec_decode_num_accepted_tokens_per_pos",
                                      "Draft tokens accepted, by their position after the newest token.",
                                      labels=["model_name", "position"])
        for position, value in enumerate(s.spec_decode_num_accepted_tokens_per_pos):
            per_pos.add_metric([self._model, str(position)], float(value))
        yield per_pos


class ServerMetrics:
    """The app's own Prometheus registry (one per app, so several apps can live in one process)."""

    def __init__(self, model_name: str, stats: Callable[[], StatsSnapshot]) -> None:
        self.model_name = model_name
        self.registry = CollectorRegistry()
        self.registry.register(_EngineStatsCollector(stats, model_name))
        labels = ["model_name"]
        self.ttft = Histogram("revolta:time_to_first_token_seconds", "Time to first token.", labels,
                              buckets=_LATENCY_BUCKETS, registry=self.registry).labels(model_name)
        self.itl = Histogram("revolta:inter_token_latency_seconds", "Time between generated tokens.", labels,
                             buckets=_ITL_BUCKETS, registry=self.registry).labels(model_name)
        self.e2e = Histogram("revolta:e2e_request_latency_seconds", "Request latency from arrival to finish.",
                             labels, buckets=_E2E_BUCKETS, registry=self.registry).labels(model_name)
        self._success = Counter("revolta:request_success", "Finished requests by finish reason.",
                                ["model_name", "finished_reason"], registry=self.registry)
        for reason in ("stop", "length", "abort"):
            self._success.labels(model_name, reason)

    def request_timer(self) -> RequestTimer:
        """Start timing one engine request (now is its arrival)."""
        return RequestTimer(self)

    def finished(self, reason: str) -> None:
        """Count one finished completion."""
        self._success.labels(self.model_name, reason).inc()


class RequestTimer:
    """Observes one request's TTFT, inter-token latencies and end-to-end latency from the outputs it sees."""

    __slots__ = ("_metrics", "_arrival", "_last", "_counted")

    def __init__(self, metrics: ServerMetrics) -> None:
        self._metrics = metrics
        self._arrival = time.monotonic()
        self._last: float | None = None
        self._counted: set[int] = set()

    def on_output(self, out: RequestOutput) -> None:
        """Record the arrival of one (DELTA) output."""
        now = time.monotonic()
        new_tokens = sum(len(c.token_ids) for c in out.outputs)
        if new_tokens:
            if self._last is None:
                self._metrics.ttft.observe(now - self._arrival)
            else:
                gap = (now - self._last) / new_tokens
                for _ in range(new_tokens):
                    self._metrics.itl.observe(gap)
            self._last = now
        for comp in out.outputs:
            if comp.finish_reason is not None and comp.index not in self._counted:
                self._counted.add(comp.index)
                self._metrics.finished(comp.finish_reason)
        if out.finished:
            self._metrics.e2e.observe(now - self._arrival)
