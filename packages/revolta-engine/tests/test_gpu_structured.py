"""Structured output on CUDA (marker ``gpu``): the grammar mask on fp16 device logits, next to
unconstrained requests that run with asynchronous scheduling and CUDA graphs in the same engine."""

from __future__ import annotations

import json
import re

import pytest
import torch
from checkpoints import make_tiny_checkpoint

from revolta_engine import LLM, SamplingParams
from revolta_engine.structured_outputs import StructuredOutputsParams

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}
REGEX = r"[0-9]{3}-[a-z]{2}"


@pytest.fixture(scope="module")
def llm(tmp_path_factory) -> LLM:
    path = make_tiny_checkpoint(tmp_path_factory.mktemp("gpu_structured") / "llama", "llama", hidden_size=256,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                intermediate_size=512, num_hidden_layers=4)
    return LLM(str(path), dtype="float16", max_model_len=512, max_num_seqs=8, kv_cache_memory_bytes=2**30)


def _prompts(n: int) -> list[dict]:
    gen = torch.Generator().manual_seed(3)
    return [{"prompt_token_ids": torch.randint(3, 200, (30 + i,), generator=gen).tolist()} for i in range(n)]


def test_constraints_hold_on_the_gpu_beside_free_requests(llm):
    json_so = StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True)
    params = [
        SamplingParams(temperature=0.0, max_tokens=120, structured_outputs=json_so),
        SamplingParams(temperature=1.0, seed=5, max_tokens=120, structured_outputs=StructuredOutputsParams(regex=REGEX)),
        SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True),
        SamplingParams(temperature=0.8, seed=1, max_tokens=32, ignore_eos=True),
    ]
    outs = llm.generate(_prompts(4), params)
    obj = json.loads(outs[0].outputs[0].text)
    assert set(obj) == {"ok", "n"} and isinstance(obj["ok"], bool) and 0 <= obj["n"] <= 99
    assert re.fullmatch(REGEX, outs[1].outputs[0].text), outs[1].outputs[0].text
    assert all(o.outputs[0].finish_reason == "stop" for o in outs[:2])
    assert [len(o.outputs[0].token_ids) for o in outs[2:]] == [32, 32]


def test_free_requests_are_unchanged_by_a_constrained_neighbour(llm):
    free = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    alone = llm.generate(_prompts(2), [free, free])
    mixed = llm.generate(_prompts(3), [free, free, SamplingParams(
        temperature=0.0, max_tokens=60, structured_outputs=StructuredOutputsParams(choice=["yes", "no"]))])
    assert [o.outputs[0].token_ids for o in mixed[:2]] == [o.outputs[0].token_ids for o in alone]
    assert mixed[2].outputs[0].text in ("yes", "no")
