"""KV offload at startup: fingerprint the cache layout and build the connector (the options are checked in
:mod:`revolta_engine.config.offload`).

The connector implementation lives in the ``revolta-offload`` package, imported here by name so that the
engine does not depend on it (the dependency points from the tiers to the engine).
"""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from revolta_engine.config.offload import OffloadConfig
from revolta_engine.core.kv_connector import KVConnector
from revolta_engine.errors import InvalidRequestError
from revolta_engine.worker.kv_cache import KVCacheSpec

if TYPE_CHECKING:
    from revolta_engine.parallel.shard_runtime import ShardSettings

OFFLOAD_MODULE = "revolta_offload"
LAYOUT_VERSION = 1  # bump when the meaning of stored block bytes changes
_WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".json")


def model_identity(path: Path, load_format: str, seed: int) -> dict[str, Any]:
    """What distinguishes one model's weights from another's without hashing gigabytes: the files' names,
    sizes and modification times (random ``dummy`` weights: the seed)."""
    path = Path(path)
    ident: dict[str, Any] = {"path": str(path.resolve()), "load_format": load_format}
    if load_format == "dummy":
        ident["seed"] = seed
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.suffix in _WEIGHT_SUFFIXES)
    ident["files"] = [(str(p.relative_to(path)) if p != path else p.name, p.stat().st_size, p.stat().st_mtime_ns)
                      for p in files if p.is_file()]
    return ident


def layout_fingerprint(identity: dict[str, Any], spec: KVCacheSpec, model_dtype: torch.dtype,
                       tensor_parallel_size: int = 1, activation_quant: str = "none", rank: int = 0) -> str:
    """A short hex name for this model + cache layout; stored blocks are only reused under the same one.

    Everything that changes the bytes of a block is in it: the weights, the dtypes, the layout, and int8
    activations (the quantized projections then compute slightly different keys and values)."""
    doc = {
        "version": LAYOUT_VERSION, "model": identity, "dtype": str(model_dtype), "kv_dtype": str(spec.dtype),
        "block_size": spec.block_size, "layers": spec.num_layers, "kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim, "tp": tensor_parallel_size, "activation_quant": activation_quant,
    }
    if rank:  # each rank's shard of a block is its own (rank 0 keeps the fingerprint it always had)
        doc["rank"] = rank
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]


def build_kv_connector(options: OffloadConfig, *, kv_caches: list, spec: KVCacheSpec, device: torch.device,
                       fingerprint: str, enable_caching: bool, hybrid: bool) -> KVConnector:
    """The offload connector, or a clear error why it cannot run with this engine."""
    if not enable_caching:
        raise InvalidRequestError("KV offload finds stored blocks by prefix hash: it needs prefix caching "
                                  "(drop --no-enable-prefix-caching)", param="kv_offloading_size")
    if hybrid:
        raise InvalidRequestError("KV offload supports models whose every layer keeps a KV cache; this hybrid "
                                  "model also keeps recurrent (Gated DeltaNet) state, which the tiers cannot "
                                  "restore", param="kv_offloading_size")
    try:
        module = importlib.import_module(OFFLOAD_MODULE)
    except ImportError as e:
        raise InvalidRequestError(f"KV offload needs the revolta-offload package ({e}); "
                                  "install it with `pip install revolta-offload`", param="kv_offloading_size") from None
    try:
        connector = module.create_connector(kv_caches=kv_caches, device=device, fingerprint=fingerprint,
                                            cpu_bytes=options.cpu_bytes, path=options.path,
                                            disk_bytes=options.disk_bytes, block_bytes=spec.bytes_per_block)
    except ValueError as e:  # the tiers' configuration errors
        raise InvalidRequestError(f"KV offload: {e}", param="kv_offload_path") from None
    return connector


def offload_connector(options: OffloadConfig | None, settings: ShardSettings, model_path: Path, spec: KVCacheSpec,
                      kv_caches: list, device: torch.device, *, hybrid: bool, rank: int = 0) -> KVConnector | None:
    """The KV connector of rank ``rank`` for ``options`` (``EngineConfig.offload``), or None when KV offload
    is off; ``settings`` are the options every rank builds with.

    With tensor parallelism every rank builds its own over its shard of the cache, with its share of the memory and
    disk budgets and its own fingerprint (so its own directory); rank 0's is wrapped so each call reaches the
    workers (:mod:`revolta_engine.parallel.kv_offload`)."""
    if options is None:
        return None
    args, tp = settings.args, settings.tensor_parallel_size
    if tp > 1:
        options = OffloadConfig(options.cpu_bytes // tp, options.path, options.disk_bytes // tp)
    fingerprint = layout_fingerprint(model_identity(model_path, args.load_format, args.seed), spec, settings.dtype,
                                     tp, settings.activation_quant, rank)
    connector = build_kv_connector(options, kv_caches=kv_caches, spec=spec, device=device, fingerprint=fingerprint,
                                   enable_caching=settings.enable_prefix_caching, hybrid=hybrid)
    if tp > 1 and rank == 0:
        from revolta_engine.parallel.kv_offload import ParallelKVConnector

        return ParallelKVConnector(connector)
    return connector
