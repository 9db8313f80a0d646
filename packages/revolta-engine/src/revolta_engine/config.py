"""Engine configuration: the user's arguments resolved against a profile, each value with its source.

A value's source is one of ``user`` (passed explicitly), ``env`` (a ``REVOLTA_*`` variable), ``profile``
(chosen for this device and model) or ``default``. The startup log prints every value with its source.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from revolta_engine.errors import InvalidRequestError

SOURCES = ("default", "profile", "env", "user")
_UNSET: Any = object()

# Environment variables that override a default (the user's explicit argument still wins).
ENV_OVERRIDES = {
    "kv_cache_memory_bytes": "REVOLTA_KV_CACHE_MEMORY_BYTES",
    "device": "REVOLTA_DEVICE",
    "max_num_batched_tokens": "REVOLTA_MAX_NUM_BATCHED_TOKENS",
    "activation_quant": "REVOLTA_ACTIVATION_QUANT",
}


@dataclass
class EngineArgs:
    """Arguments of the engine, with vLLM's names.

    ``model`` None means the embedded default model (SmolLM2-135M-Instruct). ``dtype`` "auto" keeps the
    checkpoint's dtype on GPUs that support it, uses float16 on Volta and float32 on the CPU.
    ``activation_quant`` "int8" rounds the activations of the CUDA quantized (AWQ / GPTQ) decode projections to int8 (faster, not
    bit-equal to "none", the fp16 path; see ``revolta_engine.layers.activation_quant``).
    ``kv_offloading_size`` / ``kv_offload_path`` turn on KV offload (the ``revolta-offload`` package): full
    blocks are also kept in CPU memory and/or files, and a prefix that left the device cache is copied back
    instead of recomputed.
    """

    model: str | None = None
    tokenizer: str | None = None
    served_model_name: str | None = None
    dtype: str = "auto"
    max_model_len: int | None = None
    block_size: int = 16
    enable_prefix_caching: bool = True
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    seed: int = 0
    skip_tokenizer_init: bool = False
    device: str = "auto"
    kv_cache_dtype: str = "auto"
    activation_quant: str = "none"
    gpu_memory_utilization: float = 0.9
    kv_cache_memory_bytes: int | None = None
    num_gpu_blocks_override: int | None = None
    tensor_parallel_size: int = 1
    enforce_eager: bool = False
    async_scheduling: bool | None = None  # None: on for CUDA devices (overlap host and device work)
    chat_template: str | None = None
    load_format: str = "auto"
    kv_offloading_size: float | None = None  # GiB of CPU memory for offloaded KV blocks (vLLM's name)
    kv_offload_path: str | None = None  # directory of the filesystem KV tier (blocks survive restarts)
    kv_offload_disk_size: float | None = None  # GiB cap of that directory (default 16)
    speculative_config: dict | None = None  # {"method": "ngram", "num_speculative_tokens": k, ...} as in vLLM
    scheduling_policy: str = "fcfs"  # "fcfs", or "priority": lower request priority values run first (vLLM)
    generation_config: str = "auto"  # sampling defaults: "auto" the checkpoint's, "vllm" none, or a path (vLLM)
    override_generation_config: dict | None = None  # merged over those defaults, e.g. {"temperature": 0.5}
    quantization: str | None = None  # vLLM's name (awq, gptq, ...): checked against the checkpoint's scheme
    trust_remote_code: bool = False  # accepted for vLLM command lines; no checkpoint code is ever run
    hf_overrides: dict | None = None  # set on the checkpoint's config before the model is built (vLLM's)
    max_logprobs: int = 20  # most logprobs (and prompt logprobs) per token a request may ask for; -1: no cap (vLLM)
    # Names of the fields the caller set explicitly (filled by from_kwargs); not an engine option.
    explicit: frozenset[str] = field(default_factory=frozenset, repr=False)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> EngineArgs:
        """Build from keyword arguments, remembering which ones the user gave."""
        names = {f.name for f in dataclasses.fields(cls)} - {"explicit"}
        unknown = set(kwargs) - names
        if unknown:
            raise TypeError(f"unknown engine argument(s): {', '.join(sorted(unknown))}")
        return cls(**kwargs, explicit=frozenset(kwargs))


@dataclass
class ResolvedValue:
    """One configuration value and where it came from."""

    value: Any
    source: str


class ConfigResolver:
    """Resolves each engine option from user > env > profile > default, recording the source."""

    def __init__(self, args: EngineArgs) -> None:
        self.args = args
        self.values: dict[str, ResolvedValue] = {}

    def resolve(self, name: str, profile_value: Any = _UNSET, *, parse=None) -> Any:
        """Return the value of ``name`` and record its source."""
        user_value = getattr(self.args, name)
        if name in self.args.explicit and user_value is not None:
            rv = ResolvedValue(user_value, "user")
        elif name in ENV_OVERRIDES and os.environ.get(ENV_OVERRIDES[name]):
            raw = os.environ[ENV_OVERRIDES[name]]
            rv = ResolvedValue(parse(raw) if parse else raw, "env")
        elif profile_value is not _UNSET:
            rv = ResolvedValue(profile_value, "profile")
        else:
            rv = ResolvedValue(user_value, "default")
        self.values[name] = rv
        return rv.value

    def set(self, name: str, value: Any, source: str) -> None:
        """Record a derived value."""
        assert source in SOURCES, f"unknown source {source}"
        self.values[name] = ResolvedValue(value, source)

    def report(self) -> list[tuple[str, Any, str]]:
        """Every resolved value as ``(name, value, source)``."""
        return [(k, v.value, v.source) for k, v in self.values.items()]


_DTYPES = {
    "float32": torch.float32, "float": torch.float32, "fp32": torch.float32,
    "float16": torch.float16, "half": torch.float16, "fp16": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
}


def parse_dtype(name: str) -> torch.dtype:
    """Map a dtype name to a torch dtype, with a clear error for unknown names."""
    try:
        return _DTYPES[name]
    except KeyError:
        raise InvalidRequestError(
            f"unknown dtype {name!r}; choose one of auto, {', '.join(sorted(_DTYPES))}", param="dtype"
        ) from None


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when a GPU is visible, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InvalidRequestError("device 'cuda' was requested but no CUDA GPU is visible", param="device")
    return device


def choose_dtype(requested: str, checkpoint_dtype: torch.dtype | None, device: torch.device) -> tuple[torch.dtype, str]:
    """Pick the compute dtype: explicit wins; ``auto`` is float32 on CPU, fp16 on Volta/Turing, else checkpoint's."""
    if requested != "auto":
        return parse_dtype(requested), "user"
    if device.type == "cpu":
        return torch.float32, "profile"
    major, _ = torch.cuda.get_device_capability(device)
    if major < 8:
        return torch.float16, "profile"
    if checkpoint_dtype in (torch.float16, torch.bfloat16):
        return checkpoint_dtype, "profile"
    return torch.float16, "profile"


# Set to 1 to allow a max_model_len past what the model was trained for (vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN works too).
ALLOW_LONG_ENV = "REVOLTA_ALLOW_LONG_MAX_MODEL_LEN"


def trained_context_length(text_config: Any) -> int:
    """The longest context the model was trained or scaled for: ``max_position_embeddings``, times the rope scaling
    factor of linear / dynamic / yarn scaling (yarn from ``original_max_position_embeddings``), as vLLM derives it;
    llama3 and longrope configs already state their scaled length."""
    length = int(getattr(text_config, "max_position_embeddings", 2048))
    params = getattr(text_config, "rope_parameters", None) or getattr(text_config, "rope_scaling", None) or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ("default", "llama3", "longrope", "su", "mrope") and params.get("factor"):
        if rope_type == "yarn":
            length = int(params.get("original_max_position_embeddings") or length)
        length = int(length * float(params["factor"]))
    return length


def resolve_max_model_len(cfg: ConfigResolver, text_config: Any) -> int:
    """``max_model_len`` (default: the model's ``max_position_embeddings``); refused past the trained context length
    unless REVOLTA_ALLOW_LONG_MAX_MODEL_LEN=1, since positions beyond it give wrong outputs (vLLM does the same)."""
    max_len = int(cfg.resolve("max_model_len", int(getattr(text_config, "max_position_embeddings", 2048))))
    if max_len < 2:
        raise InvalidRequestError(f"max_model_len must be at least 2, got {max_len}", param="max_model_len")
    trained = trained_context_length(text_config)
    allowed = any(os.environ.get(name) == "1" for name in (ALLOW_LONG_ENV, "VLLM_ALLOW_LONG_MAX_MODEL_LEN"))
    if max_len > trained and not allowed:
        raise InvalidRequestError(f"max_model_len {max_len} is longer than the {trained} positions this model was "
                                  f"trained for (max_position_embeddings and rope scaling in its config); outputs past "
                                  f"them are wrong. Lower --max-model-len, or set {ALLOW_LONG_ENV}=1 to run it anyway",
                                  param="max_model_len")
    return max_len


def native_kernels_note(device: torch.device, available: bool, status: str) -> str | None:
    """The warning an engine on ``device`` gives at startup when the native kernels are not loaded (``status`` is
    ``revolta_kernels.native_status()``): on a GPU every op then runs its torch reference, many times slower. None
    on the CPU, where the reference is the path, or when the kernels are in use."""
    if device.type != "cuda" or available:
        return None
    return (f"the native CUDA kernels are not in use ({status}); every op runs its torch reference on {device}, "
            "which is many times slower")
