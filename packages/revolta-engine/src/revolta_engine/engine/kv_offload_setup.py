"""KV offload at startup: check the options, fingerprint the cache layout and build the connector.

The connector implementation lives in the ``revolta-offload`` package, imported here by name so that the
engine does not depend on it (the dependency points from the tiers to the engine).
"""

from __future__ import annotations

import hashlib
import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from revolta_engine.config import ConfigResolver
from revolta_engine.core.kv_connector import KVConnector
from revolta_engine.errors import InvalidRequestError
from revolta_engine.worker.kv_cache import KVCacheSpec

if TYPE_CHECKING:
    from revolta_engine.parallel.shard_runtime import ShardSettings

OFFLOAD_MODULE = "revolta_offload"
LAYOUT_VERSION = 1  # bump when the meaning of stored block bytes changes
DEFAULT_DISK_GIB = 16.0
_WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".json")


@dataclass(frozen=True)
class KVOffloadOptions:
    """The resolved offload options: CPU tier bytes (0: none), the files' directory (None: none) and cap."""

    cpu_bytes: int
    path: str | None
    disk_bytes: int


def resolve_offload_options(cfg: ConfigResolver) -> KVOffloadOptions | None:
    """Read ``kv_offloading_size`` (GiB of CPU memory), ``kv_offload_path`` and ``kv_offload_disk_size`` (GiB)."""
    cpu_gib = cfg.resolve("kv_offloading_size")
    path = cfg.resolve("kv_offload_path")
    disk_gib = cfg.resolve("kv_offload_disk_size")
    if cpu_gib is not None and not cpu_gib >= 0:
        raise InvalidRequestError(f"kv_offloading_size must be >= 0 GiB, got {cpu_gib}", param="kv_offloading_size")
    if disk_gib is not None and not disk_gib > 0:
        raise InvalidRequestError(f"kv_offload_disk_size must be > 0 GiB, got {disk_gib}",
                                  param="kv_offload_disk_size")
    if disk_gib is not None and not path:
        raise InvalidRequestError("kv_offload_disk_size needs kv_offload_path (the directory for the files)",
                                  param="kv_offload_disk_size")
    if not cpu_gib and not path:
        return None
    if path is not None:
        cfg.set("kv_offload_disk_size", disk_gib or DEFAULT_DISK_GIB,
                cfg.values["kv_offload_disk_size"].source if disk_gib is not None else "default")
    return KVOffloadOptions(int((cpu_gib or 0) * 2**30), str(path) if path else None,
                            int((disk_gib or DEFAULT_DISK_GIB) * 2**30))


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


def build_kv_connector(options: KVOffloadOptions, *, kv_caches: list, spec: KVCacheSpec, device: torch.device,
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


def offload_connector(options: KVOffloadOptions | None, settings: ShardSettings, model_path: Path, spec: KVCacheSpec,
                      kv_caches: list, device: torch.device, *, hybrid: bool, rank: int = 0) -> KVConnector | None:
    """The KV connector of rank ``rank`` for ``options`` (:func:`resolve_offload_options`), or None when KV offload
    is off; ``settings`` are the options every rank builds with.

    With tensor parallelism every rank builds its own over its shard of the cache, with its share of the memory and
    disk budgets and its own fingerprint (so its own directory); rank 0's is wrapped so each call reaches the
    workers (:mod:`revolta_engine.parallel.kv_offload`)."""
    if options is None:
        return None
    args, tp = settings.args, settings.tensor_parallel_size
    if tp > 1:
        options = KVOffloadOptions(options.cpu_bytes // tp, options.path, options.disk_bytes // tp)
    fingerprint = layout_fingerprint(model_identity(model_path, args.load_format, args.seed), spec, settings.dtype,
                                     tp, settings.activation_quant, rank)
    connector = build_kv_connector(options, kv_caches=kv_caches, spec=spec, device=device, fingerprint=fingerprint,
                                   enable_caching=settings.enable_prefix_caching, hybrid=hybrid)
    if tp > 1 and rank == 0:
        from revolta_engine.parallel.kv_offload import ParallelKVConnector

        return ParallelKVConnector(connector)
    return connector
