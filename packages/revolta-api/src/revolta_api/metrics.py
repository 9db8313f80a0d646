"""Prometheus metrics with vLLM's names under a ``revolta:`` prefix.

Engine state (running/waiting requests, KV usage, token and prefix-cache counters, preemptions, tokens per
engine step) is read from the client's latest statistics at scrape time; latencies, request sizes and finish
reasons are observed per request here. Queue, prefill, decode and inference times come from the engine's own
timestamps (:class:`RequestMetrics`), so they are intervals of one process's clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from revolta_api.engine_client import StatsSnapshot
from revolta_engine.engine.stats import ITERATION_TOKEN_BUCKETS
from revolta_engine.outputs import RequestOutput
from revolta_engine.sampling_params import SamplingParams

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0)
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                240.0, 480.0, 960.0, 1920.0, 7680.0)
_N_BUCKETS = (1, 2, 5, 10, 20)


def token_count_buckets(max_model_len: int) -> tuple[int, ...]:
    """vLLM's 1-2-5 buckets for token counts, up to the context length: 1, 2, 5, 10, 20, 50, ..."""
    bounds: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            bound = mantissa * scale
            if bound > max_model_len:
                return tuple(bounds)
            bounds.append(bound)
        scale *= 10


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
        yield _iteration_tokens(s, self._model)


def _iteration_tokens(stats: StatsSnapshot, model: str) -> HistogramMetricFamily:
    """The engine's per-step token counts as vLLM's ``iteration_tokens_total`` histogram."""
    family = HistogramMetricFamily("revolta:iteration_tokens_total", "Tokens run through the model per engine step.",
                                   labels=["model_name"])
    cumulative, buckets = 0, []
    bounds = (*(floatToGoString(b) for b in ITERATION_TOKEN_BUCKETS), "+Inf")  # "1.0", as Histogram writes them
    for bound, count in zip(bounds, stats.iteration_tokens_counts, strict=True):
        cumulative += count
        buckets.append((bound, float(cumulative)))
    family.add_metric([model], buckets, float(stats.iteration_tokens_sum))
    return family


class ServerMetrics:
    """The app's own Prometheus registry (one per app, so several apps can live in one process)."""

    def __init__(self, model_name: str, stats: Callable[[], StatsSnapshot], max_model_len: int = 8192) -> None:
        self.model_name = model_name
        self.registry = CollectorRegistry()
        self.registry.register(_EngineStatsCollector(stats, model_name))

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, ["model_name"], buckets=buckets, registry=self.registry).labels(model_name)

        tokens = token_count_buckets(max_model_len)
        self.ttft = histogram("revolta:time_to_first_token_seconds", "Time to first token.", _LATENCY_BUCKETS)
        self.itl = histogram("revolta:inter_token_latency_seconds", "Time between generated tokens.", _ITL_BUCKETS)
        self.e2e = histogram("revolta:e2e_request_latency_seconds", "Request latency from arrival to finish.",
                             _E2E_BUCKETS)
        self.queue_time = histogram("revolta:request_queue_time_seconds",
                                    "Time a request waited before it was first scheduled.", _E2E_BUCKETS)
        self.prefill_time = histogram("revolta:request_prefill_time_seconds",
                                      "Time from first scheduled to first generated token.", _E2E_BUCKETS)
        self.decode_time = histogram("revolta:request_decode_time_seconds",
                                     "Time from first to last generated token.", _E2E_BUCKETS)
        self.inference_time = histogram("revolta:request_inference_time_seconds",
                                        "Time from first scheduled to last generated token.", _E2E_BUCKETS)
        self.tpot = histogram("revolta:request_time_per_output_token_seconds",
                              "Mean time per generated token after the first, per request.", _ITL_BUCKETS)
        self.prompt_tokens = histogram("revolta:request_prompt_tokens", "Prompt tokens per request.", tokens)
        self.generation_tokens = histogram("revolta:request_generation_tokens",
                                           "Generated tokens per completion.", tokens)
        self.max_generation_tokens = histogram("revolta:request_max_num_generation_tokens",
                                               "Generated tokens of a request's longest completion.", tokens)
        self.params_n = histogram("revolta:request_params_n", "The n parameter of requests.", _N_BUCKETS)
        self.params_max_tokens = histogram("revolta:request_params_max_tokens",
                                           "The max_tokens parameter of requests.", tokens)
        self._success = Counter("revolta:request_success", "Finished requests by finish reason.",
                                ["model_name", "finished_reason"], registry=self.registry)
        for reason in ("stop", "length", "abort"):
            self._success.labels(model_name, reason)

    def request_timer(self, params: SamplingParams | None = None) -> RequestTimer:
        """Start timing one engine request (now is its arrival); ``params`` feed the request-parameter metrics."""
        return RequestTimer(self, params)

    def finished(self, reason: str) -> None:
        """Count one finished completion."""
        self._success.labels(self.model_name, reason).inc()


class RequestTimer:
    """Observes one request's latencies, sizes and parameters from the outputs it sees."""

    __slots__ = ("_metrics", "_params", "_arrival", "_last", "_counted", "_generated", "_prompt_len")

    def __init__(self, metrics: ServerMetrics, params: SamplingParams | None = None) -> None:
        self._metrics = metrics
        self._params = params
        self._arrival = time.monotonic()
        self._last: float | None = None
        self._counted: set[int] = set()
        self._generated: dict[int, int] = {}  # completion index -> tokens generated
        self._prompt_len = 0

    def on_output(self, out: RequestOutput) -> None:
        """Record the arrival of one (DELTA) output."""
        now = time.monotonic()
        new_tokens = 0
        for comp in out.outputs:
            new_tokens += len(comp.token_ids)
            self._generated[comp.index] = self._generated.get(comp.index, 0) + len(comp.token_ids)
        self._prompt_len = max(self._prompt_len, len(out.prompt_token_ids))
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
            self._observe_finished(out)

    def _observe_finished(self, out: RequestOutput) -> None:
        """The per-request histograms vLLM records when a request finishes."""
        m = self._metrics
        m.prompt_tokens.observe(self._prompt_len)
        for count in self._generated.values():
            m.generation_tokens.observe(count)
        longest = max(self._generated.values(), default=0)
        m.max_generation_tokens.observe(longest)
        if self._params is not None:
            m.params_n.observe(self._params.n)
            if self._params.max_tokens is not None:
                m.params_max_tokens.observe(self._params.max_tokens)
        times = out.metrics
        if times is None or times.first_scheduled_time is None:
            return  # never scheduled (rejected or aborted while waiting)
        m.queue_time.observe(times.first_scheduled_time - times.arrival_time)
        if times.first_token_time is None or times.last_token_time is None:
            return
        m.prefill_time.observe(times.first_token_time - times.first_scheduled_time)
        decode = times.last_token_time - times.first_token_time
        m.decode_time.observe(decode)
        m.inference_time.observe(times.last_token_time - times.first_scheduled_time)
        if longest > 1:
            m.tpot.observe(decode / (longest - 1))
