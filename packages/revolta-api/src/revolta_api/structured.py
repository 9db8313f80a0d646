"""Structured output requests the server cannot honour yet are refused (400), never silently ignored.

A client asking for JSON that matches a schema must either get it (constrained decoding: a grammar token mask
in the engine's sampler, not offered yet) or a clear error; text that merely hopes to match is neither.
"""

from __future__ import annotations

from typing import Any

from revolta_api.errors import bad_request

_NEEDS = "needs constrained decoding (a grammar token mask in the sampler), which this server does not offer yet"
# vLLM's request fields that ask for constrained output.
_VLLM_FIELDS = ("structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar")


def check_openai_structured_output(fields: dict[str, Any]) -> None:
    """400 for ``response_format`` json_object/json_schema and vLLM's structured output fields."""
    response_format = fields.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type", "text") != "text":
        raise bad_request(f"response_format {response_format.get('type')!r} {_NEEDS}.", param="response_format")
    for name in _VLLM_FIELDS:
        if fields.get(name) is not None:
            raise bad_request(f"{name} {_NEEDS}.", param=name)


def check_anthropic_structured_output(fields: dict[str, Any]) -> None:
    """400 for Anthropic's ``output_config.format`` (JSON schema outputs)."""
    config = fields.get("output_config")
    if isinstance(config, dict) and config.get("format") is not None:
        raise bad_request(f"output_config.format {_NEEDS}.", param="output_config.format")
