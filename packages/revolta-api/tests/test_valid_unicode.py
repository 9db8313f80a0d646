"""Text that is not valid Unicode (an unpaired UTF-16 surrogate, which JSON can escape) is a 400 naming the field
on every endpoint, wherever it sits in the body, and the server keeps answering."""

from __future__ import annotations

import httpx
import pytest
from anthropic_server import serve

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


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": %s}], "max_tokens": 2}' % BAD,
     "messages.0.content"),
    ("/v1/chat/completions", '{%s, "stop": ["a", %s]}' % (CHAT, BAD), "stop.1"),
    ("/v1/chat/completions", '{%s, "guided_choice": [%s]}' % (CHAT, BAD), "guided_choice.0"),
    ("/v1/chat/completions", '{%s, "structured_outputs": {"regex": %s}}' % (CHAT, BAD), "structured_outputs.regex"),
    ("/v1/chat/completions", '{%s, %s: 1}' % (CHAT, BAD), "\\ud800x"),
    ("/v1/completions", '{"prompt": ["ok", %s], "max_tokens": 2}' % BAD, "prompt.1"),
    ("/v1/completions", '{"prompt": "hi", "max_tokens": 2, "bad_words": [%s]}' % BAD, "bad_words.0"),
    ("/tokenize", '{"prompt": %s}' % BAD, "prompt"),
    ("/tokenize", '{"messages": [{"role": "user", "content": %s}]}' % BAD, "messages.0.content"),
    ("/v1/responses", '{"input": "hi", "instructions": %s}' % BAD, "instructions"),
    ("/v1/messages", '{"model": "smol", "max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "text", '
                     '"text": %s}]}]}' % BAD, "messages.0.content.0.text"),
    ("/v1/messages/count_tokens", '{"model": "smol", "system": %s, "messages": [{"role": "user", "content": "hi"}]}'
     % BAD, "system"),
])
def test_unpaired_surrogates_are_400s_naming_the_field(url, path, body, param):
    r = httpx.post(url + path, content=body, headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert f"{param} holds an unpaired UTF-16 surrogate" in error["message"]
    if "param" in error:  # OpenAI's error shape has the slot, Anthropic's does not
        assert error["param"] == param
    ok = httpx.post(url + "/v1/completions", json={"prompt": "hi \U0001F600", "max_tokens": 1}, timeout=60)
    assert ok.status_code == 200  # a valid pair (an emoji) is fine, and the server still answers
