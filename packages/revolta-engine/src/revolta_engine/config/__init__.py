"""Engine configuration: :class:`EngineArgs` (what the caller gave, vLLM's names) resolved by
:func:`resolve_engine_config` into a frozen :class:`EngineConfig` before the engine is built.

Modules: ``args`` (EngineArgs), ``sources`` (each value's source: user / env / profile / default), ``device``
(device and dtype), ``model_len`` (max_model_len against the trained context), ``speculative``
(``speculative_config``), ``offload`` (KV offload options), ``checkpoint`` (opening the checkpoint and the options
checked against it), ``engine_config`` (the frozen tree), ``resolve`` (resolution and every fail-fast check).
"""

from revolta_engine.config.args import EngineArgs
from revolta_engine.config.checkpoint import open_checkpoint
from revolta_engine.config.device import (
    check_dtype_on_device,
    choose_dtype,
    native_kernels_note,
    parse_dtype,
    resolve_device,
)
from revolta_engine.config.engine_config import (
    CacheConfig,
    EngineConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
)
from revolta_engine.config.model_len import ALLOW_LONG_ENV, resolve_max_model_len, trained_context_length
from revolta_engine.config.offload import OffloadConfig
from revolta_engine.config.resolve import resolve_engine_config
from revolta_engine.config.sources import ENV_OVERRIDES, SOURCES, ConfigResolver, ResolvedValue
from revolta_engine.config.speculative import SpeculativeConfig, parse_speculative_config

__all__ = [
    "ALLOW_LONG_ENV", "ENV_OVERRIDES", "SOURCES", "CacheConfig", "ConfigResolver", "EngineArgs", "EngineConfig",
    "ModelConfig", "OffloadConfig", "ParallelConfig", "ResolvedValue", "SchedulerConfig", "SpeculativeConfig",
    "check_dtype_on_device", "choose_dtype", "native_kernels_note", "open_checkpoint", "parse_dtype",
    "parse_speculative_config", "resolve_device", "resolve_engine_config", "resolve_max_model_len",
    "trained_context_length",
]
