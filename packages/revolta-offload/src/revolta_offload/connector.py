"""The tiered offload connector: the engine's KV connector over a CPU memory tier and a filesystem tier.

Stores are write-through: a block that fills with computed tokens is copied to the host once (on the engine's
CUDA stream, so after the forward pass that wrote it) and then kept by every configured tier. A background
thread waits for the copy and does the tier work (the file writes above all), so the engine loop never waits
on a disk. Lookups read the CPU tier first, then the files (a file hit is promoted to the CPU tier); the files
of one lookup are read and verified by a small thread pool, since reading and hashing release the GIL.

On a CUDA device the CPU tier keeps its blocks in pinned memory, so a hit goes to the GPU straight from each
block's own memory; blocks in pageable memory (files read without a CPU tier, or pinning failed) are stacked
into a pinned buffer first.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from revolta_engine.core.kv_connector import ConnectorStats
from revolta_offload.block_codec import HostBlock
from revolta_offload.cpu_tier import CpuTier, HostCopier
from revolta_offload.disk_tier import DiskTier

logger = logging.getLogger(__name__)

CHUNK_BYTES = 64 << 20  # device staging per copy and per part (keys, values, scales)
READ_THREADS = 8  # block files read and verified at once (at most one per core)
# LayerKVCache attribute -> tensor name in a HostBlock
_PARTS = (("key", "key"), ("value", "value"), ("k_scales", "key_scale"), ("v_scales", "value_scale"))


class TieredOffloadConnector:
    """Implements :class:`revolta_engine.core.kv_connector.KVConnector` over ``cpu`` and/or ``disk``."""

    def __init__(self, kv_caches: Sequence[Any], device: torch.device, cpu: CpuTier | None,
                 disk: DiskTier | None) -> None:
        if cpu is None and disk is None:
            raise ValueError("the offload connector needs a CPU tier, a disk tier or both")
        self.kv_caches = list(kv_caches)
        self.device = device
        self.cpu = cpu
        self.disk = disk
        # int8 caches carry per-token scales; other dtypes keep empty scale tensors
        self._parts = [(attr, name) for attr, name in _PARTS if getattr(self.kv_caches[0], attr).numel() > 0]
        # Blocks per copy: a long prompt's blocks move in pieces of at most CHUNK_BYTES of device memory per
        # part, so the staging tensors fit in the headroom the memory plan leaves beside the KV cache.
        key_bytes = sum(c.key[0].numel() * c.key.element_size() for c in self.kv_caches)
        self._chunk = max(1, CHUNK_BYTES // max(key_bytes, 1))
        self._stats = ConnectorStats()
        self._pending: set[bytes] = set()  # hashes queued for the writer, not yet in a tier
        self._lock = threading.Lock()
        self._jobs: queue.Queue = queue.Queue()
        self._copier = HostCopier(pin=device.type == "cuda" and cpu is not None)
        self._writer = threading.Thread(target=_write_loop, args=(self._jobs, cpu, disk, self._copier, self._done),
                                        name="revolta-kv-offload", daemon=True)
        self._writer.start()
        self._readers = (ThreadPoolExecutor(max(1, min(READ_THREADS, os.cpu_count() or 1)),
                                            thread_name_prefix="revolta-kv-read") if disk is not None else None)
        self._closed = False
        self._finalizer = weakref.finalize(self, _stop_workers, self._jobs, self._writer, self._readers)

    # ------------------------------------------------------------------------------------------ lookup
    def lookup(self, block_hashes: Sequence[bytes]) -> list[HostBlock]:
        """The leading blocks held by a tier, in order; stops at the first miss."""
        out: list[HostBlock] = []
        for block_hash in block_hashes:
            block = self.cpu.get(block_hash) if self.cpu is not None else None
            if block is None:
                break
            out.append(block)
        if self.disk is None or self._closed or len(out) == len(block_hashes):
            return out
        rest = self._leading_held(block_hashes[len(out):])
        for block in self._readers.map(self._fetch, rest) if self._readers is not None else ():
            if block is None:  # damaged or removed since the presence check: the hit ends here
                break
            out.append(block)
        return out

    def _leading_held(self, block_hashes: Sequence[bytes]) -> list[bytes]:
        """The leading hashes some tier holds (a cheap presence check, so no file past a miss is read)."""
        held = []
        for block_hash in block_hashes:
            if not ((self.cpu is not None and block_hash in self.cpu)
                    or (self.disk is not None and block_hash in self.disk)):
                break
            held.append(block_hash)
        return held

    def _fetch(self, block_hash: bytes) -> HostBlock | None:
        """One block from the CPU tier, else from its file (then kept in the CPU tier too)."""
        block = self.cpu.get(block_hash) if self.cpu is not None else None
        if block is None and self.disk is not None:
            block = self.disk.get(block_hash)
            if block is not None and self.cpu is not None:
                block = self._copier.block(block)
                self.cpu.put(block_hash, block)
        return block

    # ------------------------------------------------------------------------------------------- load
    def load(self, block_ids: Sequence[int], blocks: Sequence[HostBlock]) -> None:
        """Copy host blocks into device blocks (on the current stream, before the next forward pass)."""
        step = self._chunk
        for start in range(0, len(block_ids), step):
            ids, chunk = block_ids[start:start + step], blocks[start:start + step]
            # through pinned memory: a plain copy of a list to the device would wait for the whole stream
            idx = torch.tensor(list(ids), dtype=torch.long, pin_memory=self.device.type == "cuda").to(
                self.device, non_blocking=True)
            for attr, name in self._parts:
                dev = self._to_device([b.tensors[name] for b in chunk])
                for layer, cache in enumerate(self.kv_caches):
                    getattr(cache, attr).index_copy_(0, idx, dev[:, layer])
        with self._lock:
            self._stats.blocks_loaded += len(blocks)
            self._stats.bytes_loaded += sum(b.nbytes for b in blocks)

    def _to_device(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """The blocks' ``[layers, ...]`` tensors stacked as ``[n, layers, ...]`` on the device."""
        first = tensors[0]
        if self.device.type == "cuda" and all(t.is_pinned() for t in tensors):
            # One asynchronous copy per block from its own pinned memory. The block may be evicted and freed
            # before its copy ran: its memory came from torch's caching host allocator, which records an event
            # on the stream at each copy and hands the memory out again only after that event.
            dev = torch.empty((len(tensors), *first.shape), dtype=first.dtype, device=self.device)
            for j, t in enumerate(tensors):
                dev[j].copy_(t, non_blocking=True)
            return dev
        # Pinned staging on CUDA, so the copy runs at full bus speed without waiting for the stream (the host
        # allocator keeps the buffer until the copy is done); a plain stack on a CPU device.
        host = torch.empty((len(tensors), *first.shape), dtype=first.dtype, pin_memory=self.device.type == "cuda")
        torch.stack(tensors, out=host)
        return host.to(self.device, non_blocking=True)

    # ------------------------------------------------------------------------------------------- save
    def save(self, block_hashes: Sequence[bytes], block_ids: Sequence[int]) -> None:
        """Copy computed device blocks to the host and queue them for the tiers (new hashes only)."""
        keep = [(h, b) for h, b in zip(block_hashes, block_ids, strict=True) if not self._held(h)]
        if not keep or self._closed:
            return
        step = self._chunk
        for start in range(0, len(keep), step):
            self._save_chunk(keep[start:start + step])

    def _save_chunk(self, keep: list[tuple[bytes, int]]) -> None:
        hashes = [h for h, _ in keep]
        idx = torch.tensor([b for _, b in keep], dtype=torch.long, device=self.device)
        host: dict[str, torch.Tensor] = {}
        for attr, name in self._parts:
            first = getattr(self.kv_caches[0], attr)
            # [layers, n, ...]: one gather per layer straight into its slice (the writer makes per-block copies)
            out = torch.empty((len(self.kv_caches), len(keep), *first.shape[1:]), dtype=first.dtype,
                              device=self.device)
            for layer, cache in enumerate(self.kv_caches):
                torch.index_select(getattr(cache, attr), 0, idx, out=out[layer])
            if self.device.type == "cuda":
                pinned = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
                pinned.copy_(out, non_blocking=True)
                out = pinned
            host[name] = out
        event = None
        if self.device.type == "cuda":
            event = torch.cuda.Event()
            event.record()
        with self._lock:
            self._pending.update(hashes)
        self._jobs.put((hashes, host, event))

    def _held(self, block_hash: bytes) -> bool:
        with self._lock:
            if block_hash in self._pending:
                return True
        if self.cpu is not None and block_hash in self.cpu:
            return True
        return self.disk is not None and self.disk.holds_intact(block_hash)

    def _done(self, hashes: list[bytes], nbytes: int) -> None:
        with self._lock:
            self._pending.difference_update(hashes)
            self._stats.blocks_saved += len(hashes)
            self._stats.bytes_saved += nbytes

    # ------------------------------------------------------------------------------------------ other
    def flush(self) -> None:
        """Wait until every queued block is in its tiers."""
        self._jobs.join()

    def stats(self) -> ConnectorStats:
        with self._lock:
            s = ConnectorStats(self._stats.blocks_saved, self._stats.blocks_loaded, self._stats.bytes_saved,
                               self._stats.bytes_loaded)
        if self.cpu is not None:
            s.tiers["cpu"] = self.cpu.stats()
        if self.disk is not None:
            s.tiers["disk"] = self.disk.stats()
        return s

    def close(self) -> None:
        """Write what is queued, then stop the writer thread; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._finalizer()


def _write_loop(jobs: queue.Queue, cpu: CpuTier | None, disk: DiskTier | None, copier: HostCopier,
                done) -> None:
    """The writer thread: wait for each copy, split it into blocks and hand them to the tiers."""
    warned = False
    while True:
        job = jobs.get()
        try:
            if job is None:
                return
            hashes, host, event = job
            if event is not None:
                event.synchronize()
            nbytes = 0
            for i, block_hash in enumerate(hashes):
                # compact copies (pinned for a CUDA device's CPU tier), so a kept block holds no whole chunk
                block = HostBlock({name: copier.copy(t[:, i]) for name, t in host.items()})
                nbytes += block.nbytes
                if cpu is not None:
                    cpu.put(block_hash, block)
                if disk is not None:
                    try:
                        disk.put(block_hash, block)
                    except OSError as e:
                        if not warned:
                            logger.warning("KV offload: cannot write blocks to %s (%s); they stay in memory only",
                                           disk.dir, e.strerror or e)
                            warned = True
            done(hashes, nbytes)
        except Exception:  # never let one bad block stop the writer
            logger.exception("KV offload: storing blocks failed")
        finally:
            jobs.task_done()


def _stop_workers(jobs: queue.Queue, writer: threading.Thread, readers: ThreadPoolExecutor | None) -> None:
    jobs.put(None)
    writer.join(timeout=60)
    if readers is not None:
        readers.shutdown(wait=True)
