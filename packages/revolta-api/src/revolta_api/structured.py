"""Structured output requests of both HTTP APIs, turned into the engine's :class:`StructuredOutputsParams`.

OpenAI's ``response_format`` (json_object, json_schema), vLLM's ``structured_outputs`` (json, regex, choice,
grammar, json_object) and its older ``guided_*`` fields, Anthropic's ``output_config.format``; and the tool calls
that ``tool_choice`` required/named (OpenAI) or any/tool (Anthropic) force, written in the exact format of the
tool-call parser that reads them back. The engine compiles the constraint into a token mask; one that cannot
compile fails its request with 400.
"""

from __future__ import annotations

import json
from typing import Any

from revolta_api.errors import bad_request
from revolta_engine.structured_outputs import MAX_JSON_WHITESPACE, StructuredOutputsParams

# vLLM's older request fields, and the StructuredOutputsParams field each one sets.
_GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice", "guided_grammar": "grammar"}
_SO_FIELDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag", "disable_any_whitespace")


def _params(param: str, **fields: Any) -> StructuredOutputsParams:
    try:
        return StructuredOutputsParams(**fields)
    except ValueError as exc:  # StructuredOutputError: names what is wrong
        raise bad_request(f"{param}: {exc}", param=param) from exc


def _response_format(value: Any) -> StructuredOutputsParams | None:
    if not isinstance(value, dict):
        raise bad_request("response_format must be an object with a 'type'.", param="response_format")
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return _params("response_format", json_object=True)
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict):
            raise bad_request("response_format json_schema needs a 'json_schema' object ({name, schema, strict}).",
                              param="response_format.json_schema")
        schema = spec.get("schema")
        if schema is None:
            return _params("response_format", json_object=True)
        if not isinstance(schema, dict):
            raise bad_request("response_format.json_schema.schema must be a JSON schema object.",
                              param="response_format.json_schema.schema")
        return _params("response_format.json_schema.schema", json=schema)
    raise bad_request(f"response_format type must be 'text', 'json_object' or 'json_schema', not {kind!r}.",
                      param="response_format.type")


def openai_structured_outputs(fields: dict[str, Any]) -> StructuredOutputsParams | None:
    """The constraint asked by ``response_format``, ``structured_outputs`` or ``guided_*`` (400 for two)."""
    found: list[tuple[str, StructuredOutputsParams | None]] = []
    if fields.get("response_format") is not None:
        found.append(("response_format", _response_format(fields["response_format"])))
    so = fields.get("structured_outputs")
    if so is not None:
        if not isinstance(so, dict):
            raise bad_request("structured_outputs must be an object.", param="structured_outputs")
        unknown = sorted(set(so) - set(_SO_FIELDS))
        if unknown:
            raise bad_request(f"structured_outputs has unknown fields {unknown}; it takes {', '.join(_SO_FIELDS)}.",
                              param="structured_outputs")
        found.append(("structured_outputs", _params("structured_outputs", **so)))
    for name, field in _GUIDED.items():
        if fields.get(name) is not None:
            found.append((name, _params(name, **{field: fields[name]})))
    asked = [(name, so) for name, so in found if so is not None]
    if len(asked) > 1:
        raise bad_request(f"only one structured output constraint may be given, got {', '.join(n for n, _ in asked)}.",
                          param=asked[1][0])
    return asked[0][1] if asked else None


def anthropic_structured_outputs(fields: dict[str, Any]) -> StructuredOutputsParams | None:
    """The JSON schema of Anthropic's ``output_config.format`` ({type: json_schema, schema}), if any."""
    config = fields.get("output_config")
    if not isinstance(config, dict) or config.get("format") is None:
        return None
    fmt = config["format"]
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise bad_request("output_config.format must be {\"type\": \"json_schema\", \"schema\": {...}}.",
                          param="output_config.format")
    return _params("output_config.format.schema", json=fmt["schema"])


def _call_format(parser: str, name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """One call of tool ``name`` exactly as the ``parser`` reads it, its arguments held to the tool's schema."""
    schema = dict(parameters or {})
    if "type" not in schema:
        schema["type"] = "object"  # arguments are always an object
    args: dict[str, Any] = {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": MAX_JSON_WHITESPACE}
    if parser == "qwen3_coder":
        args = {"type": "json_schema", "json_schema": schema, "style": "qwen_xml"}
        return {"type": "tag", "begin": f"<tool_call>\n<function={name}>\n", "content": args,
                "end": "\n</function>\n</tool_call>"}
    if parser == "llama3_json":
        return {"type": "tag", "begin": f'{{"name": {json.dumps(name)}, "parameters": ', "content": args,
                "end": "}"}
    # hermes (and the default when no parser is configured)
    return {"type": "tag", "begin": f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": ', "content": args,
            "end": "}\n</tool_call>"}


_SEPARATORS = {"llama3_json": "; "}
FORCED_TOOLS_PARSER = "hermes"  # the call format forced calls use when the server has no --tool-call-parser


def forced_tool_calls(tools: list[dict[str, Any]], *, parser: str, name: str | None = None,
                      parallel: bool = True) -> StructuredOutputsParams:
    """The output is tool calls and nothing else: one call of tool ``name``, or (``name`` None) one or more
    calls (just one unless ``parallel``) of any of ``tools`` (OpenAI function format)."""
    functions = [t["function"] for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    if name is not None:
        functions = [f for f in functions if f.get("name") == name]
    tags = [_call_format(parser, f["name"], f.get("parameters") or {}) for f in functions]
    if len(tags) == 1 and (name is not None or not parallel):
        fmt: dict[str, Any] = tags[0]
    else:
        fmt = {"type": "tags_with_separator", "tags": tags, "separator": _SEPARATORS.get(parser, "\n"),
               "at_least_one": True, "stop_after_first": name is not None or not parallel}
    return StructuredOutputsParams(structural_tag={"type": "structural_tag", "format": fmt})


def _as_format(so: StructuredOutputsParams) -> dict[str, Any]:
    """``so`` as a structural-tag format, to follow a reasoning block."""
    kind = so.kind()
    ws: dict[str, Any] = {} if so.disable_any_whitespace else {"max_whitespace_cnt": MAX_JSON_WHITESPACE}
    if kind == "structural_tag":
        tag = json.loads(so.structural_tag) if isinstance(so.structural_tag, str) else so.structural_tag
        return tag["format"]  # type: ignore[index]
    if kind == "json":
        schema = json.loads(so.json) if isinstance(so.json, str) else so.json
        return {"type": "json_schema", "json_schema": schema, **ws}
    if kind == "json_object":
        return {"type": "json_schema", "json_schema": {"type": "object"}, **ws}
    if kind == "regex":
        return {"type": "regex", "pattern": so.regex}
    if kind == "choice":
        return {"type": "or", "elements": [{"type": "const_string", "value": c} for c in so.choice or []]}
    return {"type": "grammar", "grammar": so.grammar}


def after_reasoning(so: StructuredOutputsParams, reasoning: Any) -> StructuredOutputsParams:
    """Leave a thinking model's reasoning free and constrain only the answer after it.

    ``reasoning`` is the request's reasoning parser (None: no thinking); its ``mode`` says how the output
    begins: "content" (no thinking), "reasoning" (the prompt opened the think block) or "undecided" (the model
    may open one).
    """
    mode = getattr(reasoning, "mode", "content") if reasoning is not None else "content"
    start, end = getattr(reasoning, "start_token", "<think>"), getattr(reasoning, "end_token", "</think>")
    if mode == "content":
        return so
    think: dict[str, Any] = {"type": "tag", "begin": "" if mode == "reasoning" else start,
                             "content": {"type": "any_text"}, "end": end}
    if mode != "reasoning":
        think = {"type": "optional", "content": think}
    fmt = {"type": "sequence", "elements": [think, {"type": "regex", "pattern": r"\n{0,2}"}, _as_format(so)]}
    return StructuredOutputsParams(structural_tag={"type": "structural_tag", "format": fmt})
