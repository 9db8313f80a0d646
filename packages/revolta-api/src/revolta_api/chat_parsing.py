"""The server's chat output parsing settings (``--tool-call-parser``, ``--reasoning-parser``), the per-request
:class:`~revolta_api.chat_output.ChatOutputParser` built from them, and the output constraint the chat APIs
(chat completions, Messages, Responses) put on the engine around that parser."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request

from revolta_api.chat_output import ChatOutputParser
from revolta_api.errors import bad_request
from revolta_api.structured import after_reasoning
from revolta_engine.sampling_params import SamplingParams
from revolta_engine.structured_outputs import StructuredOutputsParams


@dataclass(frozen=True)
class ChatParsing:
    """Which tool-call and reasoning parsers the server runs on chat outputs (None: none)."""

    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = False
    reasoning_parser: str | None = None

    def __post_init__(self) -> None:
        # Unknown names fail at startup, not on the first request.
        if self.tool_call_parser is not None:
            from revolta_api.tool_parsers import get_tool_parser

            get_tool_parser(self.tool_call_parser)
        if self.reasoning_parser is not None:
            from revolta_api.reasoning import get_reasoning_parser

            get_reasoning_parser(self.reasoning_parser)

    @property
    def stops_after_reasoning(self) -> bool:
        """True when stop strings are matched by the API (only on content), not by the engine."""
        return self.reasoning_parser is not None

    def output_parser(self, tokenizer: Any, *, prompt_ids: list[int], tools: list[dict] | None,
                      thinking: bool | None, stop: list[str] | None, tool_call_parser: str | None = None
                      ) -> ChatOutputParser:
        """A fresh parser for one choice of one request (``tool_call_parser`` overrides the server's, for calls
        forced in a format of the API's choosing)."""
        tool_call_parser = tool_call_parser or self.tool_call_parser
        reasoning = tool_parser = None
        if self.reasoning_parser is not None:
            from revolta_api.reasoning import get_reasoning_parser

            reasoning = get_reasoning_parser(self.reasoning_parser)(tokenizer, prompt_ids=prompt_ids,
                                                                    thinking=thinking)
        if tool_call_parser is not None and tools:
            from revolta_api.tool_parsers import get_tool_parser

            tool_parser = get_tool_parser(tool_call_parser)(tokenizer, tools)
        return ChatOutputParser(reasoning=reasoning, tools=tool_parser,
                                stop=list(stop or []) if self.stops_after_reasoning else [])


def get_parsing(request: Request) -> ChatParsing:
    """The app's :class:`ChatParsing` (none configured: plain text)."""
    return getattr(request.app.state, "revolta_parsing", None) or ChatParsing()


def output_constraint(forced: StructuredOutputsParams | None, structured: StructuredOutputsParams | None, *,
                      conflict: str) -> StructuredOutputsParams | None:
    """The one constraint on a chat request's output: the tool calls its tool choice forces, else the structured
    output it asked for (None: neither). Both is a 400 on ``tool_choice`` whose message is ``conflict``, in the
    words of the API's own fields."""
    if forced is None:
        return structured
    if structured is not None:
        raise bad_request(conflict, param="tool_choice")
    return forced


def constrain_after_reasoning(params: SamplingParams, parser: ChatOutputParser, parsing: ChatParsing) -> None:
    """Hold only the answer after ``parser``'s reasoning to ``params``' constraint, and take the stop strings from
    the engine when the parser matches them (on the content, never inside the thinking)."""
    if params.structured_outputs is not None:
        params.structured_outputs = after_reasoning(params.structured_outputs, parser.reasoning)
    if parsing.stops_after_reasoning:
        params.stop = []
