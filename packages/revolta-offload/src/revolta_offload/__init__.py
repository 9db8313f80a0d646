"""revolta-offload: KV cache offload tiers (CPU memory, filesystem) behind the engine's KV connector protocol.

The engine imports this module by name when KV offload is configured (``kv_offloading_size``,
``kv_offload_path``) and calls :func:`create_connector`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from revolta_offload.block_codec import CorruptBlockError, HostBlock, decode_block, encode_block
from revolta_offload.connector import TieredOffloadConnector
from revolta_offload.cpu_tier import CpuTier
from revolta_offload.disk_tier import DiskTier, OffloadConfigError

logger = logging.getLogger(__name__)

__all__ = ["CorruptBlockError", "CpuTier", "DiskTier", "HostBlock", "OffloadConfigError", "TieredOffloadConnector",
           "create_connector", "decode_block", "encode_block"]


def create_connector(*, kv_caches: Sequence[Any], device: torch.device, fingerprint: str, cpu_bytes: int,
                     path: str | None, disk_bytes: int, block_bytes: int) -> TieredOffloadConnector:
    """The connector the engine asked for: a CPU tier of ``cpu_bytes`` (0: none) and/or files under ``path``."""
    cpu = CpuTier(cpu_bytes) if cpu_bytes > 0 else None
    disk = DiskTier(path, fingerprint, disk_bytes) if path else None
    parts = []
    if cpu is not None:
        parts.append(f"CPU memory {cpu_bytes / 2**30:.2f} GiB (~{cpu_bytes // max(block_bytes, 1)} blocks)")
    if disk is not None:
        parts.append(f"files under {disk.dir} up to {disk_bytes / 2**30:.2f} GiB "
                     f"({len(disk)} blocks kept from earlier runs)")
    logger.info("KV offload: %s; %.0f KiB per block", " and ".join(parts), block_bytes / 1024)
    return TieredOffloadConnector(kv_caches, device, cpu, disk)
