"""Text that is not valid Unicode (an unpaired UTF-16 surrogate, which JSON can escape) is a 400 naming the field
on every endpoint, wherever it sits in the body, and the server keeps answering."""

from __future__ import annotations

import httpx
import pytest
from sdk_server import serve

from revolta_api.valid_unicode import unpaired_surrogate_at

BAD = '"\\ud800x"'  # JSON text of a string holding a lone high surrogate
CHAT = '"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2'


@pytest.fixture(scope="module")
def url():
    with serve() as (base, _):
        yield base


def test_the_first_bad_string_is_found_with_its_path():
    assert unpaired_surrogate_at({"a": ["ok", {"b": "\ud800"}]}) == "a.1.b"
    assert unpaired_surrogate_at({"\udc00": 1}) == "\\udc00"
    assert unpaired_surrogate_at(["fine \U0001F600", {"k": [1, 2.0, None]}]) is None
    assert unpaired_surrogate_at("\ud83d") == "body"


# Request bodies as JSON text; "@" stands for the bad string.
CASES = [
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": @}], "max_tokens": 2}', "messages.0.content"),
    ("/v1/chat/completions", '{CHAT, "stop": ["a", @]}', "stop.1"),
    ("/v1/chat/completions", '{CHAT, "guided_choice": [@]}', "guided_choice.0"),
    ("/v1/chat/completions", '{CHAT, "structured_outputs": {"regex": @}}', "structured_outputs.regex"),
    ("/v1/chat/completions", '{CHAT, @: 1}', "\\ud800x"),
    ("/v1/completions", '{"prompt": ["ok", @], "max_tokens": 2}', "prompt.1"),
    ("/v1/completions", '{"prompt": "hi", "max_tokens": 2, "bad_words": [@]}', "bad_words.0"),
    ("/tokenize", '{"prompt": @}', "prompt"),
    ("/tokenize", '{"messages": [{"role": "user", "content": @}]}', "messages.0.content"),
    ("/v1/responses", '{"input": "hi", "instructions": @}', "instructions"),
    ("/v1/messages", '{"model": "smol", "max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "text", '
                     '"text": @}]}]}', "messages.0.content.0.text"),
    ("/v1/messages/count_tokens", '{"model": "smol", "system": @, "messages": [{"role": "user", "content": "hi"}]}',
     "system"),
]


@pytest.mark.parametrize(("path", "body", "param"), CASES)
def test_unpaired_surrogates_are_400s_naming_the_field(url, path, body, param):
    body = body.replace("CHAT", CHAT).replace("@", BAD)
    r = httpx.post(url + path, content=body, headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert f"{param} holds an unpaired UTF-16 surrogate" in error["message"]
    if "param" in error:  # OpenAI's error shape has the slot, Anthropic's does not
        assert error["param"] == param
    ok = httpx.post(url + "/v1/completions", json={"prompt": "hi \U0001F600", "max_tokens": 1}, timeout=60)
    assert ok.status_code == 200  # a valid pair (an emoji) is fine, and the server still answers
