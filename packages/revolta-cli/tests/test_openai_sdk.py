"""The real ``openai`` SDK against ``revolta serve`` (no model argument: the embedded SmolLM2)."""

from __future__ import annotations

import httpx
import openai
import pytest
from conftest import SMOL_NAME

CAPITAL = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def client(smol_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=smol_server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def test_models_lists_the_default_model_with_its_context(client):
    models = client.models.list().data
    assert models[0].id == SMOL_NAME
    assert models[0].model_extra["max_model_len"] == 512


def test_chat_answers_paris(client):
    reply = client.chat.completions.create(model=SMOL_NAME, messages=CAPITAL, max_tokens=12, temperature=0)
    choice = reply.choices[0]
    assert "Paris" in choice.message.content
    assert choice.message.role == "assistant"
    assert reply.usage.completion_tokens >= 1
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_stream_matches_non_stream_and_ends_with_usage(client):
    kwargs = dict(model=SMOL_NAME, messages=CAPITAL, max_tokens=8, temperature=0)
    whole = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_raw_stream_ends_with_done(smol_server):
    body = {"model": SMOL_NAME, "messages": CAPITAL, "max_tokens": 2, "stream": True}
    with httpx.stream("POST", smol_server.url + "/v1/chat/completions", json=body, timeout=300) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    assert all(ln.startswith("data: ") for ln in lines)


def test_chat_logprobs_and_top_logprobs(client):
    reply = client.chat.completions.create(model=SMOL_NAME, messages=CAPITAL, max_tokens=3, temperature=0,
                                           logprobs=True, top_logprobs=3)
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0.0
        assert len(entry.top_logprobs) == 3
        tops = [t.logprob for t in entry.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        # greedy: the chosen token is the most likely one
        assert entry.token == entry.top_logprobs[0].token
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob, abs=1e-4)
    assert "".join(e.token for e in content) == reply.choices[0].message.content


def test_n_two_gives_two_choices_with_usage_for_both(client):
    reply = client.chat.completions.create(model=SMOL_NAME, messages=CAPITAL, max_tokens=4, n=2, seed=7,
                                           temperature=1.0, extra_body={"ignore_eos": True})
    assert sorted(c.index for c in reply.choices) == [0, 1]
    assert all(c.finish_reason == "length" for c in reply.choices)
    assert reply.usage.completion_tokens == 8


def test_stream_n_two_finishes_each_choice_once(client):
    chunks = list(client.chat.completions.create(
        model=SMOL_NAME, messages=CAPITAL, max_tokens=3, n=2, seed=1, stream=True,
        extra_body={"ignore_eos": True}))
    finishes = [(c.choices[0].index, c.choices[0].finish_reason) for c in chunks
                if c.choices and c.choices[0].finish_reason]
    assert sorted(finishes) == [(0, "length"), (1, "length")]


def test_seed_makes_sampling_reproducible(client):
    kwargs = dict(model=SMOL_NAME, messages=[{"role": "user", "content": "Tell me a word."}], max_tokens=4,
                  temperature=1.0)
    first = client.chat.completions.create(**kwargs, seed=1234).choices[0].message.content
    again = client.chat.completions.create(**kwargs, seed=1234).choices[0].message.content
    assert first == again
    others = {client.chat.completions.create(**kwargs, seed=s).choices[0].message.content for s in (1, 2)}
    assert len(others | {first}) > 1


def test_stop_string_ends_the_answer(client):
    greedy = client.chat.completions.create(model=SMOL_NAME, messages=CAPITAL, max_tokens=8, temperature=0)
    text = greedy.choices[0].message.content
    assert " is" in text
    stopped = client.chat.completions.create(model=SMOL_NAME, messages=CAPITAL, max_tokens=8, temperature=0,
                                             stop=[" is"])
    assert stopped.choices[0].message.content == text[: text.index(" is")]
    assert stopped.choices[0].finish_reason == "stop"
    kept = client.chat.completions.create(model=SMOL_NAME, messages=CAPITAL, max_tokens=8, temperature=0,
                                          stop=[" is"], extra_body={"include_stop_str_in_output": True})
    assert kept.choices[0].message.content == text[: text.index(" is") + 3]


def test_vllm_extras_are_accepted(client):
    reply = client.chat.completions.create(
        model=SMOL_NAME, messages=CAPITAL, max_completion_tokens=5, temperature=0.5, top_p=0.9, seed=3,
        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "min_tokens": 5, "ignore_eos": True,
                    "skip_special_tokens": True, "chat_template_kwargs": {"enable_thinking": False},
                    "stop_token_ids": [2]})
    assert reply.usage.completion_tokens == 5


def test_completions_text_batch_and_token_ids(client, smol_server):
    ids = httpx.post(smol_server.url + "/tokenize", json={"prompt": "The capital of France is"}).json()["tokens"]
    single = client.completions.create(model=SMOL_NAME, prompt="The capital of France is", max_tokens=3,
                                       temperature=0)
    from_ids = client.completions.create(model=SMOL_NAME, prompt=ids, max_tokens=3, temperature=0)
    assert single.choices[0].text == from_ids.choices[0].text
    batch = client.completions.create(model=SMOL_NAME, prompt=["The capital of France is", "Hello"],
                                      max_tokens=3, temperature=0)
    assert [c.index for c in batch.choices] == [0, 1]
    assert batch.choices[0].text == single.choices[0].text
    id_batch = client.completions.create(model=SMOL_NAME, prompt=[ids, ids[:2]], max_tokens=3, temperature=0)
    assert id_batch.choices[0].text == single.choices[0].text
    assert batch.usage.prompt_tokens == len(ids) + len(
        httpx.post(smol_server.url + "/tokenize", json={"prompt": "Hello"}).json()["tokens"])


def test_completions_echo_and_logprobs(client):
    prompt = "The capital of France is"
    reply = client.completions.create(model=SMOL_NAME, prompt=prompt, max_tokens=3, temperature=0, echo=True,
                                      logprobs=2)
    choice = reply.choices[0]
    assert choice.text.startswith(prompt)
    lp = choice.logprobs
    generated = len(lp.tokens) - reply.usage.prompt_tokens
    assert generated == reply.usage.completion_tokens == 3
    assert "".join(lp.tokens) == choice.text
    assert lp.text_offset == sorted(lp.text_offset)
    for token_lp, top in zip(lp.token_logprobs[-3:], lp.top_logprobs[-3:], strict=True):
        assert token_lp <= 0.0 and 1 <= len(top) <= 3
    # the prompt's own logprobs (prompt_logprobs): none for the first token, then one per prompt token
    n_prompt = reply.usage.prompt_tokens
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    for token_lp, top in zip(lp.token_logprobs[1:n_prompt], lp.top_logprobs[1:n_prompt], strict=True):
        assert token_lp <= 0.0 and 1 <= len(top) <= 3


def test_echo_logprobs_score_a_continuation(client):
    """Loglikelihood scoring as lm-evaluation-harness does it: echo the prompt with logprobs, one token out."""
    def last_token_logprob(text: str) -> float:
        reply = client.completions.create(model=SMOL_NAME, prompt=text, max_tokens=1, temperature=0, echo=True,
                                          logprobs=1)
        return reply.choices[0].logprobs.token_logprobs[reply.usage.prompt_tokens - 1]

    assert last_token_logprob("The capital of France is Paris") > last_token_logprob("The capital of France is banana")


def test_vllm_prompt_logprobs_field(smol_server):
    """vLLM's ``prompt_logprobs`` request field: every prompt token's logprob, rank and top k, in the choice
    (completions) or the reply (chat); the same values as echo + logprobs; refused with streaming."""
    url = smol_server.url + "/v1"
    prompt = "The capital of France is"
    body = {"model": SMOL_NAME, "prompt": prompt, "max_tokens": 1, "temperature": 0}
    reply = httpx.post(url + "/completions", json={**body, "prompt_logprobs": 2}, timeout=300).json()
    ids = httpx.post(smol_server.url + "/tokenize", json={"prompt": prompt}).json()["tokens"]
    entries = reply["choices"][0]["prompt_logprobs"]
    assert len(entries) == len(ids) == reply["usage"]["prompt_tokens"] and entries[0] is None
    for token_id, entry in zip(ids[1:], entries[1:], strict=True):
        own = entry[str(token_id)]
        assert own["logprob"] <= 0.0 and own["rank"] >= 1 and isinstance(own["decoded_token"], str)
        assert {1, 2} <= {e["rank"] for e in entry.values()}  # the two most likely tokens
        assert len(entry) == (2 if own["rank"] <= 2 else 3)  # and the prompt token itself
    echo = httpx.post(url + "/completions", json={**body, "echo": True, "logprobs": 1}, timeout=300).json()
    echoed = echo["choices"][0]["logprobs"]["token_logprobs"][1:len(ids)]
    assert echoed == pytest.approx([entries[i][str(t)]["logprob"] for i, t in enumerate(ids) if i], abs=1e-5)

    chat = httpx.post(url + "/chat/completions", json={
        "model": SMOL_NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "prompt_logprobs": 0,
    }, timeout=300).json()
    assert len(chat["prompt_logprobs"]) == chat["usage"]["prompt_tokens"]
    assert all(len(e) == 1 for e in chat["prompt_logprobs"][1:])

    streamed = httpx.post(url + "/completions", json={**body, "prompt_logprobs": 1, "stream": True}, timeout=300)
    assert streamed.status_code == 400 and "prompt_logprobs" in streamed.text


def test_logit_bias_and_allowed_token_ids(client, smol_server):
    """OpenAI's logit_bias forces (or bans) tokens; vLLM's allowed_token_ids restricts them; bad values are 400s."""
    ids = httpx.post(smol_server.url + "/tokenize", json={"prompt": " Paris", "add_special_tokens": False}).json()
    paris = ids["tokens"][-1]
    forced = client.completions.create(model=SMOL_NAME, prompt="Hello", max_tokens=3, temperature=0,
                                       logit_bias={str(paris): 100})
    assert forced.choices[0].text == " Paris" * 3
    chat = client.chat.completions.create(model=SMOL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                          max_tokens=2, temperature=0.7, logit_bias={str(paris): 100})
    assert chat.choices[0].message.content == " Paris" * 2
    only = client.completions.create(model=SMOL_NAME, prompt="Hello", max_tokens=2, temperature=0,
                                     extra_body={"allowed_token_ids": [paris]})
    assert only.choices[0].text == " Paris" * 2
    for bias, message in (({"abc": 5}, "token ids"), ({str(paris): 150}, "-100 to 100"),
                          ({"99999999": 5}, "outside the vocabulary")):
        with pytest.raises(openai.BadRequestError, match=message):
            client.completions.create(model=SMOL_NAME, prompt="Hello", max_tokens=1, logit_bias=bias)


def test_cache_salt_keeps_prefix_cache_hits_within_a_salt(client):
    """vLLM's cache_salt: a salted prompt reuses only blocks computed under the same salt."""
    prompt = "Tell me about the history of the city of Lyon, its silk industry and its food. " * 4

    def cached(**extra) -> int:
        reply = client.completions.create(model=SMOL_NAME, prompt=prompt, max_tokens=1, temperature=0,
                                          extra_body=extra)
        return reply.usage.prompt_tokens_details.cached_tokens

    cached(cache_salt="tenant-a")
    assert cached(cache_salt="tenant-b") == 0
    assert cached() == 0  # unsalted blocks are another cache again
    assert cached(cache_salt="tenant-a") > 0
    assert cached() > 0


def test_completions_stream_with_usage(client):
    chunks = list(client.completions.create(model=SMOL_NAME, prompt="Hello", max_tokens=4, temperature=0,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True}))
    assert chunks[-1].usage.completion_tokens == 4
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_tokenize_detokenize_round_trip(smol_server):
    text = "Paris is lovely in spring."
    tokens = httpx.post(smol_server.url + "/tokenize", json={"prompt": text}).json()
    assert tokens["count"] == len(tokens["tokens"]) and tokens["max_model_len"] == 512
    back = httpx.post(smol_server.url + "/detokenize", json={"tokens": tokens["tokens"]}).json()
    assert back["prompt"] == text
    chat = httpx.post(smol_server.url + "/tokenize", json={"messages": CAPITAL}).json()
    reply = openai.OpenAI(base_url=smol_server.url + "/v1", api_key="x").chat.completions.create(
        model=SMOL_NAME, messages=CAPITAL, max_tokens=1)
    assert chat["count"] == reply.usage.prompt_tokens


def test_health_version_and_metrics(smol_server):
    assert httpx.get(smol_server.url + "/health").status_code == 200
    assert httpx.get(smol_server.url + "/version").json()["version"]
    metrics = httpx.get(smol_server.url + "/metrics").text
    for name in ("revolta:num_requests_running", "revolta:num_requests_waiting", "revolta:kv_cache_usage_perc",
                 "revolta:prompt_tokens_total", "revolta:generation_tokens_total",
                 "revolta:time_to_first_token_seconds_bucket", "revolta:inter_token_latency_seconds_bucket",
                 "revolta:e2e_request_latency_seconds_bucket", "revolta:prefix_cache_queries_total",
                 "revolta:prefix_cache_hits_total", "revolta:num_preemptions_total",
                 'revolta:request_success_total{finished_reason="length"',
                 "revolta:request_queue_time_seconds_bucket", "revolta:request_prefill_time_seconds_bucket",
                 "revolta:request_decode_time_seconds_bucket", "revolta:request_prompt_tokens_bucket",
                 "revolta:request_generation_tokens_bucket", "revolta:request_params_n_bucket",
                 "revolta:iteration_tokens_total_bucket"):
        assert name in metrics, name


def test_bad_words_keep_a_word_out_of_the_answer(client):
    """vLLM's bad_words: the token sequence of a word (at the start or after a space) is never generated."""
    plain = client.chat.completions.create(model=SMOL_NAME, messages=CAPITAL, max_tokens=16, temperature=0)
    assert "Paris" in plain.choices[0].message.content
    banned = client.chat.completions.create(model=SMOL_NAME, messages=CAPITAL, max_tokens=16, temperature=0,
                                            extra_body={"bad_words": ["Paris"]})
    assert "Paris" not in banned.choices[0].message.content
    with pytest.raises(openai.BadRequestError, match="bad_words"):
        client.completions.create(model=SMOL_NAME, prompt="Hello", max_tokens=1, extra_body={"bad_words": [" "]})


def test_truncate_prompt_tokens_keeps_the_prompt_end(client, smol_server):
    prompt = "Once upon a time there was a lighthouse keeper who lived alone. The capital of France is"
    tail = httpx.post(smol_server.url + "/tokenize", json={"prompt": prompt}).json()["tokens"][-6:]
    cut = client.completions.create(model=SMOL_NAME, prompt=prompt, max_tokens=4, temperature=0,
                                    extra_body={"truncate_prompt_tokens": 6})
    assert cut.usage.prompt_tokens == 6
    direct = client.completions.create(model=SMOL_NAME, prompt=tail, max_tokens=4, temperature=0)
    assert cut.choices[0].text == direct.choices[0].text
    chat = client.chat.completions.create(model=SMOL_NAME, messages=CAPITAL, max_tokens=1,
                                          extra_body={"truncate_prompt_tokens": 3})
    assert chat.usage.prompt_tokens == 3
    with pytest.raises(openai.BadRequestError, match="truncate_prompt_tokens"):
        client.completions.create(model=SMOL_NAME, prompt="Hello", max_tokens=1,
                                  extra_body={"truncate_prompt_tokens": 0})


def test_priority_needs_the_priority_policy(client):
    """vLLM's per-request priority: refused by a first-come-first-served server unless it is 0."""
    with pytest.raises(openai.BadRequestError, match="priority scheduling policy"):
        client.completions.create(model=SMOL_NAME, prompt="Hello", max_tokens=1, extra_body={"priority": 2})
    ok = client.completions.create(model=SMOL_NAME, prompt="Hello", max_tokens=1, extra_body={"priority": 0})
    assert ok.choices[0].text is not None
