"""The msgspec messages between the server and the engine core carry the engine's dataclasses intact."""

from __future__ import annotations

import msgspec

from revolta_api.clients.ipc import (
    AddRequest,
    InputMessage,
    OutputMessage,
    Outputs,
    RequestFailed,
    error_info,
    rebuild_error,
)
from revolta_api.engine_client import StatsSnapshot
from revolta_engine.errors import InvalidRequestError, PromptTooLongError
from revolta_engine.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from revolta_engine.sampling_params import RequestOutputKind, SamplingParams


def test_add_request_round_trip_keeps_every_sampling_field():
    params = SamplingParams(n=2, temperature=0.3, top_p=0.9, top_k=5, min_p=0.1, seed=2**63 + 5, max_tokens=7,
                            stop=["x", "yz"], stop_token_ids=[3], logprobs=2, ignore_eos=True,
                            output_kind=RequestOutputKind.DELTA, extra_args={"a": [1, 2]})
    for prompt in ("hello", [1, 2, 3]):
        data = msgspec.msgpack.encode(AddRequest("r1", prompt, params))
        back = msgspec.msgpack.Decoder(InputMessage).decode(data)
        assert isinstance(back, AddRequest) and back.prompt == prompt
        assert back.params == params
        assert back.params.output_kind is RequestOutputKind.DELTA


def test_outputs_round_trip_with_logprobs_and_metrics():
    out = RequestOutput(
        "r1", None, [1, 2], [CompletionOutput(0, "hi", [5], -0.5, [{5: Logprob(-0.5, 1, "hi"), 7: Logprob(-1.0, 2)}],
                                              "stop", "hi")],
        True, prompt_logprobs=[None, {2: Logprob(-3.0, 4, "b")}], num_cached_tokens=16,
        metrics=RequestMetrics(arrival_time=1.5, first_token_time=2.0))
    message = Outputs([out], StatsSnapshot(num_running=1, kv_cache_usage=0.25))
    back = msgspec.msgpack.Decoder(OutputMessage).decode(msgspec.msgpack.encode(message))
    assert back.outputs == [out] and back.stats == message.stats


def test_engine_errors_cross_the_process_boundary_with_their_type_and_fields():
    for exc in (PromptTooLongError(600, 512), InvalidRequestError("bad top_p", param="top_p"), KeyError("x")):
        message = RequestFailed("r", error_info(exc))
        back = msgspec.msgpack.Decoder(OutputMessage).decode(msgspec.msgpack.encode(message))
        rebuilt = rebuild_error(back.error)
        assert str(rebuilt) == str(exc)
        if isinstance(exc, InvalidRequestError):
            assert type(rebuilt) is type(exc) and rebuilt.param == exc.param
    rebuilt = rebuild_error(error_info(PromptTooLongError(600, 512)))
    assert (rebuilt.prompt_len, rebuilt.max_model_len) == (600, 512)


def test_structured_output_constraints_and_their_errors_cross_intact():
    from revolta_api.structured import forced_tool_calls
    from revolta_engine.errors import StructuredOutputError
    from revolta_engine.structured_outputs import StructuredOutputsParams

    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    for so in (StructuredOutputsParams(json={"type": "object", "properties": {"a": {"type": "integer"}}}),
               StructuredOutputsParams(json="{}", disable_any_whitespace=True),
               StructuredOutputsParams(choice=["a", "b"]), forced_tool_calls(tools, parser="hermes")):
        data = msgspec.msgpack.encode(AddRequest("r1", [1], SamplingParams(structured_outputs=so)))
        back = msgspec.msgpack.Decoder(InputMessage).decode(data)
        assert back.params.structured_outputs == so
    error = rebuild_error(error_info(StructuredOutputError("the regex cannot be compiled", param="x.regex")))
    assert isinstance(error, StructuredOutputError) and error.param == "x.regex"


def test_engine_stats_cross_intact_and_become_prometheus_counters():
    """The per-position acceptance counts (vLLM's spec_decode_num_accepted_tokens_per_pos) survive the process
    boundary and are rendered with a position label."""
    from prometheus_client import generate_latest

    from revolta_api.metrics import ServerMetrics
    from revolta_engine.engine.stats import EngineStats

    stats = EngineStats()
    for proposed, accepted in ((3, 3), (3, 1), (3, 0)):
        stats.note_drafts(proposed, accepted)
    assert stats.spec_decode_num_accepted_tokens_per_pos == [2, 1, 1]
    got = msgspec.msgpack.Decoder(Outputs).decode(msgspec.msgpack.Encoder().encode(Outputs([], stats))).stats
    assert got == stats
    text = generate_latest(ServerMetrics("m", lambda: got).registry).decode()
    for position, value in enumerate((2, 1, 1)):
        line = f'revolta:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",position="{position}"}}'
        assert f"{line} {float(value)}" in text
