"""KV offload options (the ``revolta-offload`` tiers): checked at startup, before the model loads."""

from __future__ import annotations

from dataclasses import dataclass

from revolta_engine.config.sources import ConfigResolver
from revolta_engine.errors import InvalidRequestError

DEFAULT_DISK_GIB = 16.0


@dataclass(frozen=True)
class OffloadConfig:
    """The resolved offload options: CPU tier bytes (0: none), the files' directory (None: none) and cap."""

    cpu_bytes: int
    path: str | None
    disk_bytes: int


def resolve_offload_options(cfg: ConfigResolver) -> OffloadConfig | None:
    """Read ``kv_offloading_size`` (GiB of CPU memory), ``kv_offload_path`` and ``kv_offload_disk_size`` (GiB);
    None when neither tier is asked for."""
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
    return OffloadConfig(int((cpu_gib or 0) * 2**30), str(path) if path else None,
                         int((disk_gib or DEFAULT_DISK_GIB) * 2**30))
