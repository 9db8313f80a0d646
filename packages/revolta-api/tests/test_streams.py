"""Per-request output queues: a slow reader gets merged deltas, errors arrive after the data before them."""

from __future__ import annotations

import asyncio

import pytest

from revolta_api.engine_client import OutputStream, merge_delta
from revolta_api.errors import ApiError, ApiFamily, family_for_path, to_api_error
from revolta_api.openai.errors import OPENAI_FAMILY, openai_error_body
from revolta_engine.outputs import CompletionOutput, Logprob, RequestOutput


def _delta(text: str, ids: list[int], index: int = 0, finish: str | None = None) -> RequestOutput:
    return RequestOutput("r", None, [1], [CompletionOutput(index, text, ids, None,
                                                           [{i: Logprob(-1.0, 1)} for i in ids], finish)],
                         finish is not None)


def test_merge_delta_concatenates_text_tokens_logprobs_per_choice():
    first = _delta("Hel", [1])
    merge_delta(first, _delta("lo", [2]))
    merge_delta(first, _delta("!", [3], index=1))
    merge_delta(first, _delta("", [], finish="length"))
    a, b = first.outputs
    assert (a.text, a.token_ids, len(a.logprobs), a.finish_reason) == ("Hello", [1, 2], 2, "length")
    assert (b.index, b.text) == (1, "!")
    assert first.finished


def test_output_stream_merges_what_piled_up_and_raises_errors_after_data():
    async def main():
        stream = OutputStream()
        stream.put(_delta("a", [1]))
        stream.put(_delta("b", [2]))
        stream.put(ValueError("boom"))
        merged = await stream.get()
        assert merged.outputs[0].text == "ab"
        with pytest.raises(ValueError):
            await stream.get()

    asyncio.run(main())


def test_errors_map_to_statuses_and_unexpected_ones_to_500():
    from revolta_api.engine_client import EngineDeadError
    from revolta_engine.errors import InvalidRequestError

    assert to_api_error(InvalidRequestError("x", param="n")).status == 400
    assert to_api_error(EngineDeadError("gone")).status == 503
    bug = to_api_error(ZeroDivisionError("oops"))
    assert bug.status == 500 and openai_error_body(bug)["error"]["type"] == "server_error"


def test_error_shape_is_chosen_by_path_prefix():
    other = ApiFamily("other", ("/v1/messages",), OPENAI_FAMILY.error_response, OPENAI_FAMILY.error_event)
    families = [OPENAI_FAMILY, other]
    assert family_for_path(families, "/v1/messages/count_tokens") is other
    assert family_for_path(families, "/v1/chat/completions") is OPENAI_FAMILY
    body = openai_error_body(ApiError(404, "no such model", "not_found", param="model"))
    assert body == {"error": {"message": "no such model", "type": "invalid_request_error", "param": "model",
                              "code": "model_not_found"}}
