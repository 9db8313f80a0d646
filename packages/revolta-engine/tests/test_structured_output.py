"""Structured output on a tiny random model: every kind of constraint holds whatever the (random) logits say,
through batching, n > 1, preemption, aborts and logits wider than the tokenizer; bad constraints fail alone."""

from __future__ import annotations

import json
import math
import re

import jsonschema
import pytest
import torch
from checkpoints import make_tiny_checkpoint

from revolta_engine import LLM, EngineArgs, LLMEngine, SamplingParams
from revolta_engine.errors import StructuredOutputError
from revolta_engine.structured_outputs import StructuredOutputsParams

# Bounded languages: a random model cannot wander off into an endless string.
SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "size": {"enum": ["small", "large"]},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    },
    "required": ["ok", "size", "n", "tags"],
    "additionalProperties": False,
}
REGEX = r"[0-9]{3}-[a-z]{2}"
CHOICES = ["yes", "no", "maybe so"]
GRAMMAR = 'root ::= "(" [0-9] ("," [0-9])? ")"'
GRAMMAR_RE = r"\([0-9](,[0-9])?\)"
# A random model picks whitespace tokens often; the one-line layout keeps its JSON short.
CASES = [
    (StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True),
     lambda t: jsonschema.validate(json.loads(t), SCHEMA)),
    (StructuredOutputsParams(json=json.dumps(SCHEMA), disable_any_whitespace=True),
     lambda t: jsonschema.validate(json.loads(t), SCHEMA)),
    (StructuredOutputsParams(regex=REGEX), lambda t: _check(re.fullmatch(REGEX, t), t)),
    (StructuredOutputsParams(choice=CHOICES), lambda t: _check(t in CHOICES, t)),
    (StructuredOutputsParams(grammar=GRAMMAR), lambda t: _check(re.fullmatch(GRAMMAR_RE, t), t)),
]


def _check(ok, text: str) -> None:
    assert ok, f"output {text!r} does not match"


def prompts(n: int, length: int = 40, seed: int = 0) -> list[dict]:
    gen = torch.Generator().manual_seed(seed)
    return [{"prompt_token_ids": torch.randint(3, 200, (length + i,), generator=gen).tolist()} for i in range(n)]


def constrained(so: StructuredOutputsParams, **kwargs) -> SamplingParams:
    return SamplingParams(**{"temperature": 0.0, "max_tokens": 200, "structured_outputs": so, **kwargs})


@pytest.fixture(scope="module")
def llm(tiny_llama) -> LLM:
    return LLM(str(tiny_llama), dtype="float32", max_model_len=512)


@pytest.mark.parametrize("case", range(len(CASES)), ids=["json", "json-text", "regex", "choice", "grammar"])
def test_each_constraint_holds_greedy_and_sampled(llm, case):
    so, check = CASES[case]
    params = [constrained(so), constrained(so, temperature=1.0, seed=7, n=3)]
    outs = llm.generate(prompts(2), params)
    for out in outs:
        for comp in out.outputs:
            check(comp.text)
            assert comp.finish_reason == "stop"


def test_json_object_is_an_object(llm):
    out = llm.generate(prompts(1), constrained(StructuredOutputsParams(json_object=True, disable_any_whitespace=True),
                                          max_tokens=300))[0]
    comp = out.outputs[0]
    if comp.finish_reason == "stop":
        assert isinstance(json.loads(comp.text), dict)
    else:  # an unbounded language: a random model may run out of tokens, but never leaves the grammar
        assert comp.text.lstrip().startswith("{")


def test_unconstrained_output_differs(llm):
    """The tiny model does not write these formats by itself: the mask is what makes the outputs valid."""
    free = llm.generate(prompts(1), SamplingParams(temperature=0.0, max_tokens=12))[0].outputs[0].text
    assert not re.fullmatch(REGEX, free) and free not in CHOICES


def test_logprobs_describe_the_masked_distribution(llm):
    params = constrained(StructuredOutputsParams(choice=["a", "b"]), logprobs=5)
    comp = llm.generate(prompts(1), params)[0].outputs[0]
    first = comp.logprobs[0]
    finite = {tid: lp.logprob for tid, lp in first.items() if math.isfinite(lp.logprob)}
    # Only the two allowed tokens have probability, and they share all of it.
    assert len(finite) == 2 and math.isclose(sum(math.exp(v) for v in finite.values()), 1.0, rel_tol=1e-4)
    assert comp.text in ("a", "b")


def test_grammar_end_is_the_end_despite_ignore_eos_and_min_tokens(llm):
    for extra in ({"ignore_eos": True}, {"min_tokens": 8}):
        comp = llm.generate(prompts(1), constrained(StructuredOutputsParams(choice=CHOICES), **extra))[0].outputs[0]
        assert comp.text in CHOICES and comp.finish_reason == "stop", extra


def test_exactly_one_constraint():
    with pytest.raises(StructuredOutputError, match="exactly one"):
        StructuredOutputsParams()
    with pytest.raises(StructuredOutputError, match="exactly one"):
        StructuredOutputsParams(regex="a", choice=["a"])
    with pytest.raises(StructuredOutputError, match="non-empty list"):
        StructuredOutputsParams(choice=[])


@pytest.mark.parametrize(("so", "param", "words"), [
    (StructuredOutputsParams(json={"type": "nonsense"}), "structured_outputs.json", "nonsense"),
    (StructuredOutputsParams(json="{not json"), "structured_outputs.json", "not valid JSON"),
    (StructuredOutputsParams(regex="(("), "structured_outputs.regex", "parenthesis"),
    (StructuredOutputsParams(grammar="root ::= missing"), "structured_outputs.grammar", "missing"),
])
def test_bad_constraint_fails_only_its_request(tiny_llama, so, param, words):
    engine = LLMEngine.from_engine_args(EngineArgs.from_kwargs(model=str(tiny_llama), dtype="float32", max_model_len=256))
    engine.add_request("good", prompts(1)[0], constrained(StructuredOutputsParams(regex=REGEX)))
    with pytest.raises(StructuredOutputError, match=words) as err:
        engine.add_request("bad", prompts(1)[0], constrained(so))
    assert err.value.param == param
    assert "bad" not in engine.requests
    done = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            done[out.request_id] = out
    assert set(done) == {"good"} and re.fullmatch(REGEX, done["good"].outputs[0].text)


def test_preemption_keeps_the_grammar_state(tiny_llama):
    ps = prompts(8)
    so = StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True)
    alone = LLM(str(tiny_llama), dtype="float32", max_model_len=256)
    expected = [alone.generate(p, constrained(so))[0].outputs[0].text for p in ps]
    # 12 blocks of 16 tokens cannot hold 8 requests of ~90 tokens: some are preempted and recomputed.
    tight = LLM(str(tiny_llama), dtype="float32", max_model_len=256, num_gpu_blocks_override=12)
    got = [o.outputs[0].text for o in tight.generate(ps, constrained(so))]
    assert tight.llm_engine.get_stats().num_preemptions > 0
    assert got == expected
    for text in got:
        jsonschema.validate(json.loads(text), SCHEMA)


def test_abort_frees_the_request_and_the_engine_goes_on(tiny_llama):
    engine = LLMEngine.from_engine_args(EngineArgs.from_kwargs(model=str(tiny_llama), dtype="float32", max_model_len=256))
    engine.add_request("a", prompts(1)[0], constrained(StructuredOutputsParams(json=SCHEMA), n=2))
    engine.step()
    engine.step()
    engine.abort_request(["a"])
    assert not engine.has_unfinished_requests() and engine.kv.usage() == 0.0
    engine.add_request("b", prompts(1)[0], constrained(StructuredOutputsParams(choice=CHOICES)))
    outs = []
    while engine.has_unfinished_requests():
        outs += engine.step()
    assert outs[-1].outputs[0].text in CHOICES


def test_logits_wider_than_the_tokenizer(tmp_path):
    # 512 tokenizer ids, 640 logits: random weights give the padded ids real mass, the mask must remove it.
    path = make_tiny_checkpoint(tmp_path, "llama", vocab_size=640, name="wide")
    llm = LLM(str(path), dtype="float32", max_model_len=256)
    free = llm.generate(prompts(4), SamplingParams(temperature=1.0, seed=0, max_tokens=30, ignore_eos=True))
    assert any(t >= 512 for o in free for t in o.outputs[0].token_ids)
    outs = llm.generate(prompts(4), constrained(StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True),
                                              temperature=1.0, seed=0))
    for out in outs:
        assert all(t < 512 for t in out.outputs[0].token_ids)
        jsonschema.validate(json.loads(out.outputs[0].text), SCHEMA)
