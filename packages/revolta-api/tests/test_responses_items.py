"""The Responses output items and stream events built from chat output events (reasoning, text, tool calls)."""

from __future__ import annotations

from revolta_api.chat_output import OutputEvent, ToolCallDelta
from revolta_api.responses.items import ItemAssembler
from revolta_api.responses.protocol import ResponsesRequest, input_messages, output_messages


def _run(events: list[OutputEvent]) -> tuple[ItemAssembler, list[dict]]:
    items = ItemAssembler()
    out = [e for event in events for e in items.feed(event)] + items.close()
    return items, out


def test_reasoning_then_text_then_two_calls():
    items, events = _run([
        OutputEvent("reasoning", "Let me "), OutputEvent("reasoning", "think."),
        OutputEvent("content", "Calling."),
        OutputEvent("tool_call", tool=ToolCallDelta(0, id="call_a", name="f", arguments='{"x": ')),
        OutputEvent("tool_call", tool=ToolCallDelta(0, arguments="1}")),
        OutputEvent("tool_call", tool=ToolCallDelta(1, id="call_b", name="g", arguments="{}")),
    ])
    kinds = [item["type"] for item in items.items]
    assert kinds == ["reasoning", "message", "function_call", "function_call"]
    assert items.items[0]["content"] == [{"type": "reasoning_text", "text": "Let me think."}]
    assert items.items[1]["content"][0]["text"] == "Calling."
    assert [(c["call_id"], c["name"], c["arguments"]) for c in items.items[2:]] == [
        ("call_a", "f", '{"x": 1}'), ("call_b", "g", "{}")]
    assert all(item["status"] == "completed" for item in items.items)
    types = [e["type"] for e in events]
    # every item is opened and closed once, in order, and its output index is its place
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    done = [e["output_index"] for e in events if e["type"] == "response.output_item.done"]
    assert added == done == [0, 1, 2, 3]
    assert types.count("response.reasoning_text.delta") == 2 and types.count("response.output_text.delta") == 1
    assert [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"] == [
        '{"x": ', "1}", "{}"]
    assert types.index("response.content_part.added") < types.index("response.output_text.delta") \
        < types.index("response.output_text.done") < types.index("response.content_part.done")


def test_output_items_become_the_next_turns_messages():
    items, _ = _run([OutputEvent("content", "Sure."),
                     OutputEvent("tool_call", tool=ToolCallDelta(0, id="call_a", name="f", arguments="{}"))])
    assert output_messages(items.items) == [
        {"role": "assistant", "content": "Sure."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]


def test_input_items_map_to_chat_messages():
    body = ResponsesRequest(input=[
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
        {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "w", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "reasoning", "summary": []},
    ])
    messages = input_messages(body)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[1]["content"] == "Weather?"
    assert [c["id"] for c in messages[2]["tool_calls"]] == ["c1", "c2"]  # one turn's parallel calls together
    assert messages[3] == {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
