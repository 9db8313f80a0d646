"""Structured output on the embedded default model (SmolLM2-135M-Instruct GGUF, loaded with its GGUF tokenizer):
every kind of constraint, a bad schema next to a good request, preemption, and 50 sampled JSON-schema
generations that must all validate."""

from __future__ import annotations

import json
import re
import time

import jsonschema
import pytest

from revolta_engine import LLM, SamplingParams
from revolta_engine.errors import StructuredOutputError
from revolta_engine.structured_outputs import StructuredOutputsParams

# Non-trivial but with short valid outputs, so a sampled answer is never cut by max_tokens.
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z][A-Za-z ]{0,15}$"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "editor", "viewer"]},
        "skills": {"type": "array", "items": {"type": "string", "pattern": "^[a-z][a-z -]{0,11}$"},
                   "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "age", "role", "skills"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Write a JSON profile of a fictional person with name, age, role and skills."}]


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(dtype="float32", max_model_len=1024)


def chat_ids(llm: LLM, text: str) -> dict:
    engine = llm.llm_engine
    return {"prompt_token_ids": engine.tokenize_prompt(engine.apply_chat_template([{"role": "user", "content": text}]))}


def greedy(so: StructuredOutputsParams, **kwargs) -> SamplingParams:
    return SamplingParams(**{"temperature": 0.0, "max_tokens": 100, "structured_outputs": so, **kwargs})


def test_every_kind_of_constraint(llm):
    cases = [
        ("Describe a person as JSON.", StructuredOutputsParams(json=PERSON),
         lambda t: jsonschema.validate(json.loads(t), PERSON)),
        ('What is the capital of France? Answer as a JSON object with the key "capital".',
         StructuredOutputsParams(json_object=True),
         lambda t: isinstance(json.loads(t), dict)),
        ("Write a US phone number.", StructuredOutputsParams(regex=r"\(\d{3}\) \d{3}-\d{4}"),
         lambda t: re.fullmatch(r"\(\d{3}\) \d{3}-\d{4}", t)),
        ("Is the sky blue? Answer yes or no.", StructuredOutputsParams(choice=["yes", "no"]),
         lambda t: t in ("yes", "no")),
        ("Name a primary colour.", StructuredOutputsParams(grammar='root ::= "Colour: " ("red" | "blue" | "yellow")'),
         lambda t: t in ("Colour: red", "Colour: blue", "Colour: yellow")),
    ]
    outs = llm.generate([chat_ids(llm, q) for q, _, _ in cases], [greedy(so) for _, so, _ in cases])
    for (question, _, check), out in zip(cases, outs, strict=True):
        comp = out.outputs[0]
        assert comp.finish_reason == "stop", (question, comp.text)
        assert check(comp.text) is not False, (question, comp.text)


def test_bad_schema_fails_alone(llm):
    engine = llm.llm_engine
    engine.add_request("good", chat_ids(llm, "Is water wet?"), greedy(StructuredOutputsParams(choice=["yes", "no"])))
    bad = StructuredOutputsParams(json={"type": "object", "properties": {"a": {"type": "integer", "minimum": "x"}}})
    with pytest.raises(StructuredOutputError) as err:
        engine.add_request("bad", chat_ids(llm, "Anything."), greedy(bad))
    assert err.value.param == "structured_outputs.json"
    done = {}
    while engine.has_unfinished_requests():
        done.update({o.request_id: o for o in engine.step() if o.finished})
    assert set(done) == {"good"} and done["good"].outputs[0].text in ("yes", "no")


def test_preempted_requests_stay_valid():
    # 11 blocks of 16 tokens: one request always fits (47 prompt + 120 max_tokens < 176), two of ~100 tokens do
    # not, so one is preempted and recomputed.
    tight = LLM(dtype="float32", max_model_len=512, num_gpu_blocks_override=11)
    prompt = chat_ids(tight, ASK[0]["content"])
    assert len(prompt["prompt_token_ids"]) + 120 < 11 * 16
    params = [SamplingParams(temperature=0.8, seed=i, max_tokens=120, structured_outputs=StructuredOutputsParams(
        json=PERSON)) for i in range(2)]
    outs = tight.generate([prompt] * 2, params)
    assert tight.llm_engine.get_stats().num_preemptions > 0
    for out in outs:
        assert out.outputs[0].finish_reason == "stop"
        jsonschema.validate(json.loads(out.outputs[0].text), PERSON)


def test_fifty_sampled_json_schema_generations_all_validate(llm):
    prompt = chat_ids(llm, ASK[0]["content"])
    so = StructuredOutputsParams(json=PERSON)
    params = [SamplingParams(temperature=0.8, seed=seed, max_tokens=200, structured_outputs=so) for seed in range(50)]
    start = time.monotonic()
    outs = llm.generate([prompt] * 50, params)
    elapsed = time.monotonic() - start
    failures = []
    for out in outs:
        text = out.outputs[0].text
        try:
            jsonschema.validate(json.loads(text), PERSON)
        except (ValueError, jsonschema.ValidationError) as exc:
            failures.append((text, str(exc).splitlines()[0]))
    assert len({o.outputs[0].text for o in outs}) > 10, "the samples should differ"
    print(f"\n{50 - len(failures)}/50 generations validate ({elapsed:.1f} s for the batch)")
    assert not failures, failures
