"""Reasoning parsers on recorded Qwen3 / DeepSeek-R1 style outputs, streamed token by token and whole."""

from __future__ import annotations

import pytest
from parser_tokenizer import deltas, encode, make_tokenizer

from revolta_api.chat_output import ChatOutputParser, merged_text
from revolta_api.reasoning import get_reasoning_parser
from revolta_engine.errors import InvalidRequestError


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def run(tok, name, ids, step, *, prompt_ids=(), thinking=None, stop=()):
    parser = ChatOutputParser(reasoning=get_reasoning_parser(name)(tok, prompt_ids=list(prompt_ids),
                                                                   thinking=thinking), stop=list(stop))
    events = []
    for text, chunk in deltas(tok, ids, step):
        events += parser.feed(text, chunk)
    events += parser.finish()
    return merged_text(events, "reasoning"), merged_text(events, "content"), parser


QWEN3 = "<think>\nThe user asks for the capital. It is Paris.\n</think>\n\nThe capital of France is Paris."


@pytest.mark.parametrize("step", [1, 2, 5, 1000])
def test_qwen3_splits_on_the_end_token(tok, step):
    reasoning, content, _ = run(tok, "qwen3", encode(tok, QWEN3), step)
    assert reasoning == "\nThe user asks for the capital. It is Paris.\n"
    assert content == "The capital of France is Paris."


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_end_tag_written_as_text_does_not_end_thinking(tok, step):
    ids = encode(tok, "<think>", "Tags look like </", "think> in XML.", "</think>", "Done.")
    assert tok.convert_tokens_to_ids("</think>") in ids
    reasoning, content, _ = run(tok, "qwen3", ids, step)
    assert reasoning == "Tags look like </think> in XML."
    assert content == "Done."


def test_qwen3_without_think_block_is_all_content(tok):
    reasoning, content, _ = run(tok, "qwen3", encode(tok, "Paris is the capital."), 1)
    assert (reasoning, content) == ("", "Paris is the capital.")


def test_qwen3_thinking_disabled_is_content_even_if_tags_appear(tok):
    reasoning, content, _ = run(tok, "qwen3", encode(tok, QWEN3), 2, thinking=False)
    assert reasoning == "" and content == QWEN3


def test_prompt_that_opens_think_starts_in_reasoning(tok):
    prompt = encode(tok, "user: hi\nassistant: ", "<think>", "\n")
    reasoning, content, _ = run(tok, "qwen3", encode(tok, "hmm", "</think>", "Hello!"), 1, prompt_ids=prompt)
    assert (reasoning, content) == ("hmm", "Hello!")
    closed = encode(tok, "<think>", "\n\n", "</think>", "\n\n")  # Qwen3's template with enable_thinking=False
    reasoning, content, _ = run(tok, "qwen3", encode(tok, "Hello!"), 1, prompt_ids=closed)
    assert (reasoning, content) == ("", "Hello!")


@pytest.mark.parametrize("text", ["Let me think. Paris.</think>It is Paris.", "<think>Let me think. Paris.</think>It is Paris."])
def test_deepseek_r1_reasons_from_the_start(tok, text):
    reasoning, content, _ = run(tok, "deepseek_r1", encode(tok, text), 2)
    assert (reasoning, content) == ("Let me think. Paris.", "It is Paris.")


def test_deepseek_r1_after_a_closed_think_block_is_content(tok):
    closed = encode(tok, "assistant\n", "<think>", "\n\n", "</think>", "\n\n")
    reasoning, content, _ = run(tok, "deepseek_r1", encode(tok, "Hello!"), 1, prompt_ids=closed)
    assert (reasoning, content) == ("", "Hello!")


def test_deepseek_r1_cut_while_thinking_is_all_reasoning(tok):
    reasoning, content, _ = run(tok, "deepseek_r1", encode(tok, "Let me think about"), 1)
    assert (reasoning, content) == ("Let me think about", "")


@pytest.mark.parametrize("step", [1, 4, 1000])
def test_stop_strings_apply_only_after_thinking(tok, step):
    reasoning, content, parser = run(tok, "qwen3", encode(tok, QWEN3), step, stop=["Paris"])
    assert reasoning == "\nThe user asks for the capital. It is Paris.\n"
    assert content == "The capital of France is "
    assert parser.stopped_by == "Paris"


def test_stop_string_not_matched_flushes_held_text(tok):
    _, content, parser = run(tok, "qwen3", encode(tok, QWEN3), 1, stop=["Paris!", "zz"])
    assert content == "The capital of France is Paris." and parser.stopped_by is None


def test_vocabulary_without_end_token_is_a_clear_error():
    class NoThink:  # a vocabulary is all the check reads
        def get_vocab(self):
            return {"a": 0}

    with pytest.raises(InvalidRequestError, match="</think>"):
        get_reasoning_parser("qwen3")(NoThink())


def test_unknown_parser_name():
    with pytest.raises(ValueError, match="deepseek_r1"):
        get_reasoning_parser("nope")
