"""Prometheus metrics: vLLM's per-request histograms and the engine's tokens-per-step histogram."""

from __future__ import annotations

import msgspec
import pytest
from prometheus_client import generate_latest

from revolta_api.clients.ipc import Outputs
from revolta_api.metrics import ServerMetrics, token_count_buckets
from revolta_engine.engine.stats import ITERATION_TOKEN_BUCKETS, EngineStats
from revolta_engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from revolta_engine.sampling_params import SamplingParams

MODEL = "m"


def sample(metrics: ServerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"model_name": MODEL, **labels})


def delta(tokens: dict[int, int], *, finished: bool = False, times: RequestMetrics | None = None) -> RequestOutput:
    """One DELTA output: ``tokens`` maps completion index -> new tokens (a finished one ends with "length")."""
    outs = [CompletionOutput(index=i, text="x" * k, token_ids=list(range(k)),
                             finish_reason="length" if finished else None) for i, k in tokens.items()]
    return RequestOutput("r", None, list(range(11)), outs, finished, metrics=times)


def test_token_count_buckets_are_vllms_1_2_5_series_up_to_the_context():
    assert token_count_buckets(8192) == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
    assert token_count_buckets(100) == (1, 2, 5, 10, 20, 50, 100)
    assert token_count_buckets(1) == (1,)


def test_a_finished_request_fills_the_request_histograms_from_the_engine_timestamps():
    metrics = ServerMetrics(MODEL, EngineStats, max_model_len=4096)
    timer = metrics.request_timer(SamplingParams(n=2, max_tokens=300))
    times = RequestMetrics(arrival_time=100.0, first_scheduled_time=100.5, first_token_time=102.0,
                           last_token_time=108.0)
    timer.on_output(delta({0: 1, 1: 1}))
    timer.on_output(delta({0: 3, 1: 1}))
    timer.on_output(delta({0: 3, 1: 2}, finished=True, times=times))
    expected = {
        "revolta:request_queue_time_seconds_sum": 0.5,
        "revolta:request_prefill_time_seconds_sum": 1.5,
        "revolta:request_decode_time_seconds_sum": 6.0,
        "revolta:request_inference_time_seconds_sum": 7.5,
        "revolta:request_time_per_output_token_seconds_sum": 1.0,  # 6 s over the longest completion's 7 - 1 gaps
        "revolta:request_prompt_tokens_sum": 11.0,
        "revolta:request_generation_tokens_sum": 11.0,  # 7 + 4, one observation per completion
        "revolta:request_generation_tokens_count": 2.0,
        "revolta:request_max_num_generation_tokens_sum": 7.0,
        "revolta:request_params_n_sum": 2.0,
        "revolta:request_params_max_tokens_sum": 300.0,
        "revolta:request_params_max_tokens_count": 1.0,
    }
    for name, value in expected.items():
        assert sample(metrics, name) == pytest.approx(value), name
    assert sample(metrics, "revolta:request_prompt_tokens_bucket", le="10.0") == 0.0
    assert sample(metrics, "revolta:request_prompt_tokens_bucket", le="20.0") == 1.0
    assert sample(metrics, "revolta:request_success_total", finished_reason="length") == 2.0


def test_a_request_aborted_before_it_ran_records_no_engine_intervals():
    metrics = ServerMetrics(MODEL, EngineStats)
    timer = metrics.request_timer(SamplingParams(max_tokens=4))
    timer.on_output(RequestOutput("r", None, [1, 2], [CompletionOutput(0, "", [], finish_reason="abort")], True,
                                  metrics=RequestMetrics(arrival_time=5.0)))
    assert sample(metrics, "revolta:request_queue_time_seconds_count") == 0.0
    assert sample(metrics, "revolta:request_prefill_time_seconds_count") == 0.0
    assert sample(metrics, "revolta:request_prompt_tokens_count") == 1.0
    assert sample(metrics, "revolta:request_success_total", finished_reason="abort") == 1.0


def test_iteration_tokens_cross_the_process_boundary_as_a_cumulative_histogram():
    stats = EngineStats()
    for tokens in (1, 1, 5, 8, 9, 300, 20000):
        stats.note_iteration(tokens)
    got = msgspec.msgpack.Decoder(Outputs).decode(msgspec.msgpack.Encoder().encode(Outputs([], stats))).stats
    assert got == stats and len(got.iteration_tokens_counts) == len(ITERATION_TOKEN_BUCKETS) + 1
    metrics = ServerMetrics(MODEL, lambda: got)
    for le, count in (("1.0", 2), ("8.0", 4), ("16.0", 5), ("256.0", 5), ("512.0", 6), ("16384.0", 6),
                      ("+Inf", 7)):
        assert sample(metrics, "revolta:iteration_tokens_total_bucket", le=le) == count, le
    assert sample(metrics, "revolta:iteration_tokens_total_sum") == 20324.0
    assert sample(metrics, "revolta:iteration_tokens_total_count") == 7.0
    assert "# TYPE revolta:iteration_tokens_total histogram" in generate_latest(metrics.registry).decode()
