"""The embedded default model, SmolLM2-135M-Instruct (GGUF Q4_1), against transformers on the same file."""

from __future__ import annotations

import pytest
import torch
from parity import assert_greedy_parity, reference_greedy

from revolta_engine import LLM, SamplingParams, default_model
from revolta_engine.engine.detokenizer import IncrementalDetokenizer

CHATS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain photosynthesis in one sentence.",
    "List three prime numbers.",
    "How do I reverse a list in Python?",
    "Translate 'good morning' into Spanish.",
]


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(dtype="float32", max_model_len=2048)


@pytest.fixture(scope="module")
def hf_model():
    from transformers import AutoModelForCausalLM

    path = default_model()
    return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()


def test_greedy_chat_matches_transformers(llm, hf_model):
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    engine = llm.llm_engine
    prompt_ids = [engine.tokenize_prompt(engine.apply_chat_template([{"role": "user", "content": c}]))
                  for c in CHATS]
    outs = llm.generate([{"prompt_token_ids": p} for p in prompt_ids], params)
    for ids, out in zip(prompt_ids, outs, strict=True):
        ref = reference_greedy(hf_model, ids, 24)
        assert_greedy_parity(hf_model, ids, out.outputs[0].token_ids, ref)


def test_chat_answers_paris(llm):
    out = llm.chat([{"role": "user", "content": "What is the capital of France?"}],
                   SamplingParams(temperature=0.0, max_tokens=24))[0]
    assert "Paris" in out.outputs[0].text
    assert out.outputs[0].finish_reason in ("stop", "length")


def test_stop_strings_cut_at_the_earliest_match(llm):
    base = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    prompt = "The history of the Roman Empire"
    full = llm.generate(prompt, base)[0].outputs[0].text
    words = full.split()
    assert len(words) > 6, full
    late, early = words[5], words[2]
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True, stop=[late, early])
    out = llm.generate(prompt, params)[0].outputs[0]
    cut = min(full.index(late), full.index(early))
    assert out.text == full[:cut]
    assert out.finish_reason == "stop" and out.stop_reason == full[cut:].split()[0][: len(out.stop_reason)]
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True, stop=[early],
                            include_stop_str_in_output=True)
    out = llm.generate(prompt, params)[0].outputs[0]
    assert out.text == full[: full.index(early) + len(early)]


def test_incremental_detokenization_never_splits_utf8(llm):
    tok = llm.get_tokenizer()
    text = "Café naïve 世界 🎉🚀 – ok."
    ids = tok.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tok, [], skip_special_tokens=True)
    pieces = [detok.add(t) for t in ids]
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == tok.decode(ids, skip_special_tokens=True)


def test_default_model_is_the_embedded_gguf():
    path = default_model()
    assert path.name.endswith(".gguf") and path.stat().st_size > 50_000_000


def test_vllm_offline_call_forms(llm):
    """What vLLM scripts pass to LLM.generate / LLM.chat: use_tqdm (a bar class gets one update per prompt),
    continue_final_message, and lora_request (refused: no adapters)."""
    greedy = SamplingParams(temperature=0.0, max_tokens=6)

    class Bar:
        made: list[Bar] = []

        def __init__(self, total: int, **kwargs: object) -> None:
            self.total, self.count, self.closed = total, 0, False
            Bar.made.append(self)

        def update(self, n: int) -> None:
            self.count += n

        def close(self) -> None:
            self.closed = True

    outs = llm.generate(["One, two,", "Red, green,"], greedy, use_tqdm=Bar)
    assert [(b.total, b.count, b.closed) for b in Bar.made] == [(2, 2, True)]
    assert [o.outputs[0].text for o in llm.generate(["One, two,", "Red, green,"], greedy, use_tqdm=False)] == \
        [o.outputs[0].text for o in outs]
    conversation = [{"role": "user", "content": "What is the capital of France?"},
                    {"role": "assistant", "content": "The capital of France is"}]
    continued = llm.chat(conversation, greedy, use_tqdm=False, add_generation_prompt=False,
                         continue_final_message=True)[0]
    rendered = llm.llm_engine.apply_chat_template(conversation, add_generation_prompt=False,
                                                  continue_final_message=True)
    assert rendered.endswith("The capital of France is")  # no end-of-turn after the final message
    assert continued.prompt_token_ids == llm.llm_engine.tokenize_prompt(rendered)
    assert "Paris" in continued.outputs[0].text
    with pytest.raises(ValueError, match="add_generation_prompt=False"):
        llm.chat(conversation, greedy, continue_final_message=True)
    with pytest.raises(ValueError, match="LoRA"):
        llm.generate("Hi", greedy, lora_request=object())
