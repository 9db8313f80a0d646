"""revolta-engine: loader, models, paged KV cache, scheduler, sampler and the offline LLM API."""

from __future__ import annotations

from revolta_engine.config import EngineArgs
from revolta_engine.engine.llm import LLM
from revolta_engine.engine.llm_engine import LLMEngine
from revolta_engine.engine.stats import EngineStats
from revolta_engine.loader import default_model
from revolta_engine.outputs import CompletionOutput, Logprob, RequestOutput
from revolta_engine.sampling_params import RequestOutputKind, SamplingParams

__version__ = "0.1.0.dev0"

__all__ = [
    "LLM",
    "CompletionOutput",
    "EngineArgs",
    "EngineStats",
    "LLMEngine",
    "Logprob",
    "RequestOutput",
    "RequestOutputKind",
    "SamplingParams",
    "default_model",
]
