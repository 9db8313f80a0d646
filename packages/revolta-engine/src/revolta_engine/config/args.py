"""The engine's arguments, with vLLM's names, as the caller gave them (resolved by :mod:`.resolve`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


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
