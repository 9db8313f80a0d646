"""The constraints the API builds, checked without a model: random walks through each forced-tool-call grammar
(any token the grammar allows, chosen at random) must read back, through the matching tool-call parser, as
calls whose arguments fit the tools' schemas; structured output after a think block leaves the thinking free.
"""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
import torch
import xgrammar as xgr
from parser_tokenizer import make_tokenizer

from revolta_api.chat_output import ChatOutputParser, fold_tool_calls, merged_text
from revolta_api.errors import ApiError
from revolta_api.structured import after_reasoning, forced_tool_calls, openai_structured_outputs
from revolta_api.tool_parsers import get_tool_parser
from revolta_engine.structured_outputs import StructuredOutputsParams

WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}, "days": {
    "type": "integer", "minimum": 1, "maximum": 9}}, "required": ["city", "days"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
        "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


@pytest.fixture(scope="module")
def compiler(tok):
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok), stop_token_ids=[tok.eos_token_id])
    return xgr.GrammarCompiler(info, max_threads=1)


def random_walk(compiler, tok, so: StructuredOutputsParams, seed: int, limit: int = 3000) -> str:
    """Text of a random path through the grammar, ended by its stop token."""
    compiled = compiler.compile_structural_tag(json.dumps(so.structural_tag))
    matcher = xgr.GrammarMatcher(compiled)
    vocab = len(tok)
    bitmask = xgr.allocate_token_bitmask(1, vocab)
    rng = random.Random(seed)
    ids: list[int] = []
    for _ in range(limit):
        matcher.fill_next_token_bitmask(bitmask)
        allowed = torch.zeros(vocab)
        xgr.apply_token_bitmask_inplace(allowed.unsqueeze(0), bitmask)
        choices = (allowed == 0).nonzero().flatten().tolist()
        token = rng.choice(choices)
        assert matcher.accept_token(token)
        if matcher.is_terminated():
            return tok.decode(ids)
        ids.append(token)
    raise AssertionError(f"no end after {limit} tokens: {tok.decode(ids)!r}")


@pytest.mark.parametrize("parser", ["hermes", "llama3_json", "qwen3_coder"])
@pytest.mark.parametrize("name", [None, "get_time"])
def test_forced_calls_read_back_through_the_parser(tok, compiler, parser, name):
    so = forced_tool_calls(TOOLS, parser=parser, name=name)
    for seed in range(6):
        text = random_walk(compiler, tok, so, seed)
        reader = ChatOutputParser(tools=get_tool_parser(parser)(tok, TOOLS))
        events = reader.feed(text, []) + reader.finish()
        calls = fold_tool_calls(events)
        assert calls and not merged_text(events, "content").strip(), text
        for call in calls:
            jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])
        if name is not None:
            assert [c["name"] for c in calls] == [name]


def test_parallel_false_allows_one_call(tok, compiler):
    so = forced_tool_calls(TOOLS, parser="hermes", parallel=False)
    for seed in range(6):
        text = random_walk(compiler, tok, so, seed)
        assert text.count("<tool_call>") == 1


class _Reasoning:
    start_token, end_token = "<think>", "</think>"

    def __init__(self, mode: str) -> None:
        self.mode = mode


def accepts(compiler, so: StructuredOutputsParams, text: str) -> bool:
    matcher = xgr.GrammarMatcher(compiler.compile_structural_tag(json.dumps(so.structural_tag)))
    return matcher.accept_string(text) and matcher.is_completed()


def test_constraint_follows_the_thinking(compiler):
    so = StructuredOutputsParams(json=TIME)
    answer = '{"zone": "UTC"}'
    assert after_reasoning(so, _Reasoning("content")) is so
    undecided = after_reasoning(so, _Reasoning("undecided"))
    assert accepts(compiler, undecided, "<think>Free text {not json}</think>\n\n" + answer)
    assert accepts(compiler, undecided, answer)
    assert not accepts(compiler, undecided, "Free text " + answer)
    inside = after_reasoning(StructuredOutputsParams(choice=["yes", "no"]), _Reasoning("reasoning"))
    assert accepts(compiler, inside, "hmm, yes or no?</think>\nno")
    assert not accepts(compiler, inside, "hmm</think>\nperhaps")


@pytest.mark.parametrize(("fields", "param"), [
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": [1]}}},
     "response_format.json_schema.schema"),
    ({"structured_outputs": {"regex": "a", "grammar": "root ::= \"a\""}}, "structured_outputs"),
    ({"structured_outputs": {"pattern": "a"}}, "structured_outputs"),
    ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice"),
])
def test_request_fields_are_checked(fields, param):
    with pytest.raises(ApiError) as err:
        openai_structured_outputs(fields)
    assert err.value.status == 400 and err.value.param == param


def test_request_fields_map_to_one_constraint():
    assert openai_structured_outputs({"response_format": {"type": "text"}}) is None
    assert openai_structured_outputs({"guided_json": {"type": "object"}}).json == {"type": "object"}
    so = openai_structured_outputs({"structured_outputs": {"choice": ["a", "b"]}})
    assert so.choice == ["a", "b"]
    assert openai_structured_outputs({"response_format": {"type": "json_object"}}).json_object
