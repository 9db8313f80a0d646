"""Hypothesis strategies from the JSON Schema subset that pydantic writes into the OpenAPI document.

(hypothesis-jsonschema does not work with current hypothesis; the subset we need is small.)
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

_TEXT = st.text(max_size=24)


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy:
    """Values valid for ``schema`` (refs must be inlined already)."""
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([from_schema(s) for s in schema[key]])
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return from_schema(schema["allOf"][0])
    kind = schema.get("type")
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -(2**40) - 1) + 1
                         if "exclusiveMinimum" in schema else None)
        high = schema.get("maximum", schema.get("exclusiveMaximum", 2**40 + 1) - 1
                          if "exclusiveMaximum" in schema else None)
        return st.integers(min_value=low, max_value=high)
    if kind == "number":
        return st.floats(min_value=schema.get("minimum", schema.get("exclusiveMinimum")),
                         max_value=schema.get("maximum", schema.get("exclusiveMaximum")),
                         exclude_min="exclusiveMinimum" in schema, exclude_max="exclusiveMaximum" in schema,
                         allow_nan=False, allow_infinity=False)
    if kind == "string":
        return st.text(min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", 24), 24))
    if kind == "array":
        items = from_schema(schema.get("items", {}))
        low = schema.get("minItems", 0)
        return st.lists(items, min_size=low, max_size=max(low, min(schema.get("maxItems", 4), 4)))
    if kind == "object" or "properties" in schema:
        return _object(schema)
    return st.none() | st.booleans() | st.integers() | _TEXT  # unconstrained


def _object(schema: dict[str, Any]) -> st.SearchStrategy:
    props = schema.get("properties", {})
    required = set(schema.get("required", ()))
    req = {k: from_schema(v) for k, v in props.items() if k in required}
    opt = {k: from_schema(v) for k, v in props.items() if k not in required}
    extra = schema.get("additionalProperties", False)
    base = st.fixed_dictionaries(req, optional=opt)
    if extra is True or isinstance(extra, dict):
        values = from_schema(extra) if isinstance(extra, dict) else _TEXT
        extras = st.dictionaries(_TEXT.filter(lambda k: k not in props), values, max_size=2)
        return st.builds(lambda a, b: {**b, **a}, base, extras)
    return base
