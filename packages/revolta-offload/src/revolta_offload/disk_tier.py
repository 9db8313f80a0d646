"""The filesystem tier: one checksummed file per block, named by its hash, under a directory per cache layout.

``<root>/<fingerprint>/<first two hex digits>/<block hash hex>.kvblock``. The fingerprint names the model and
the cache layout (:func:`revolta_engine.engine.kv_offload_setup.layout_fingerprint`), so blocks of another model
or dtype are never read. Files are written to a temporary name and renamed into place, so a reader never sees a
partial file; blocks survive restarts and can be shared by engines on one machine. The tier keeps the directory
under ``capacity_bytes``, removing the least recently used first (use refreshes a file's mtime, which orders the
files). It indexes the directory at startup and again every ``rescan_interval_s`` while it writes, so the files of
other engines sharing the directory count against the size too.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import OrderedDict
from pathlib import Path

from revolta_offload.block_codec import (
    HEADER_BYTES,
    CorruptBlockError,
    HostBlock,
    decode_pieces,
    encode_block,
)

logger = logging.getLogger(__name__)

SUFFIX = ".kvblock"
_TMP = ".tmp"


class OffloadConfigError(ValueError):
    """The offload directory cannot be used (not creatable, not writable)."""


class DiskTier:
    """Blocks in files; thread-safe (the connector writes from its own thread while the engine reads)."""

    def __init__(self, root: str | Path, fingerprint: str, capacity_bytes: int,
                 rescan_interval_s: float = 30.0) -> None:
        if capacity_bytes <= 0:
            raise OffloadConfigError(f"the disk tier needs a positive size, got {capacity_bytes} bytes")
        self.root = Path(root).expanduser()
        self.fingerprint = fingerprint
        self.capacity_bytes = capacity_bytes
        self.dir = self.root / fingerprint
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            probe = self.dir / f".probe-{os.getpid()}-{uuid.uuid4().hex}{_TMP}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise OffloadConfigError(f"cannot write KV offload files under {self.dir}: {e.strerror or e}") from None
        self._lock = threading.Lock()
        self._files: OrderedDict[str, int] = OrderedDict()  # hash hex -> size, least recently used first
        self._bytes = 0
        self.evictions = 0
        self.corrupt = 0
        self._stamp = 0
        self._verified: set[str] = set()  # files this process wrote or read back intact
        self.rescan_interval_s = rescan_interval_s
        self._scan()

    # -------------------------------------------------------------------------------------------- index
    def _scan(self) -> None:
        """Index the directory, oldest use first (files of earlier runs and of other engines sharing it); remove
        temp files of dead writers; then evict down to the size."""
        self._last_scan = time.monotonic()
        found = []
        for path in self.dir.glob("*/*"):
            if path.name.endswith(_TMP):
                if not _writer_alive(path.name):
                    path.unlink(missing_ok=True)
                continue
            if not path.name.endswith(SUFFIX):
                continue
            try:
                st = path.stat()
            except OSError:
                continue
            found.append((st.st_mtime_ns, path.name[:-len(SUFFIX)], st.st_size))
        files = OrderedDict((key, size) for _, key, size in sorted(found))
        with self._lock:
            for key in self._files.keys() - files.keys():  # removed by another engine meanwhile
                self._verified.discard(key)
            self._files, self._bytes = files, sum(files.values())
            self._stamp = max([self._stamp] + [stamp for stamp, _, _ in found])
            self._evict_over_capacity()

    # --------------------------------------------------------------------------------------------- access
    def path_for(self, block_hash: bytes) -> Path:
        key = block_hash.hex()
        return self.dir / key[:2] / f"{key}{SUFFIX}"

    def __contains__(self, block_hash: bytes) -> bool:
        with self._lock:
            if block_hash.hex() in self._files:
                return True
        return self.path_for(block_hash).is_file()  # written by another engine sharing the directory

    def holds_intact(self, block_hash: bytes) -> bool:
        """True if this process wrote the block's file or read it back intact (and it is still kept): a
        store of the same block can be skipped. Files only found on disk may be damaged, so they are
        rewritten when their block is computed again."""
        key = block_hash.hex()
        with self._lock:
            return key in self._verified and key in self._files

    def __len__(self) -> int:
        return len(self._files)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def get(self, block_hash: bytes) -> HostBlock | None:
        """Read and verify the block; None if absent. A damaged file is removed and reported as a miss."""
        path = self.path_for(block_hash)
        try:
            with open(path, "rb") as f:
                # into a bytearray, so the block's tensors are writable views of it (no copy under the GIL)
                header, payload = f.read(HEADER_BYTES), bytearray(max(os.fstat(f.fileno()).st_size - HEADER_BYTES, 0))
                del payload[f.readinto(payload):]  # a file cut short meanwhile: its checksum fails below
        except FileNotFoundError:
            with self._lock:
                self._forget(block_hash.hex())
            return None
        except OSError as e:
            logger.warning("KV offload: cannot read %s (%s); recomputing that block", path, e.strerror or e)
            return None
        try:
            block = decode_pieces(header, payload, block_hash, self.fingerprint)
        except CorruptBlockError as e:
            logger.warning("KV offload: %s is damaged (%s); removed it, the block will be recomputed", path, e)
            self.corrupt += 1
            path.unlink(missing_ok=True)
            with self._lock:
                self._forget(block_hash.hex())
            return None
        self._touch(path)
        with self._lock:
            key = block_hash.hex()
            if key not in self._files:
                self._files[key] = len(header) + len(payload)
                self._bytes += len(header) + len(payload)
            self._files.move_to_end(key)
            self._verified.add(key)
        return block

    def put(self, block_hash: bytes, block: HostBlock) -> bool:
        """Write the block atomically (temp file, then rename); False if it does not fit or the write failed."""
        pieces = encode_block(block_hash, self.fingerprint, block)
        size = sum(len(piece) for piece in pieces)
        if size > self.capacity_bytes:
            return False
        path = self.path_for(block_hash)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}{_TMP}")
        try:
            path.parent.mkdir(exist_ok=True)
            # No fsync: a file torn by a power loss fails its checksum when read and is recomputed, and the
            # rename alone keeps readers from ever seeing a partial file.
            with open(tmp, "wb") as f:
                for piece in pieces:
                    f.write(piece)
            os.replace(tmp, path)
            self._touch(path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        key = block_hash.hex()
        with self._lock:
            self._forget(key)
            self._files[key] = size
            self._bytes += size
            self._verified.add(key)
            self._evict_over_capacity()
        if time.monotonic() - self._last_scan >= self.rescan_interval_s:
            self._scan()  # in the writer's thread: the engine loop never waits for the listing
        return True

    def stats(self) -> dict[str, int]:
        return {"blocks": len(self._files), "bytes": self._bytes, "capacity_bytes": self.capacity_bytes,
                "evictions": self.evictions, "corrupt": self.corrupt}

    # ------------------------------------------------------------------------------------------- internal
    def _touch(self, path: Path) -> None:
        """Stamp ``path`` as the most recently used file. The stamps strictly increase (file systems keep a
        coarse clock), so the next process's startup scan sees this process's order of use exactly."""
        with self._lock:
            self._stamp = max(time.time_ns(), self._stamp + 1)
            stamp = self._stamp
        try:
            os.utime(path, ns=(stamp, stamp))
        except OSError:
            pass

    def _forget(self, key: str) -> None:
        self._verified.discard(key)
        size = self._files.pop(key, None)
        if size is not None:
            self._bytes -= size

    def _evict_over_capacity(self) -> None:
        while self._bytes > self.capacity_bytes and self._files:
            key, size = self._files.popitem(last=False)
            self._verified.discard(key)
            self._bytes -= size
            self.evictions += 1
            (self.dir / key[:2] / f"{key}{SUFFIX}").unlink(missing_ok=True)


def _writer_alive(tmp_name: str) -> bool:
    """Whether the process that named this temp file (``<name>.<pid>.<tag>.tmp``) still runs on this host."""
    parts = tmp_name.split(".")
    try:
        pid = int(parts[-3])
    except (IndexError, ValueError):
        return False
    if pid == os.getpid():
        return False  # a file of this process found at startup is from an earlier run with a reused pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
