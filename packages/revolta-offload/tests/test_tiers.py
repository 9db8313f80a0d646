"""The offload tiers on their own: block files, the CPU LRU and the filesystem tier."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from revolta_offload import CorruptBlockError, CpuTier, DiskTier, HostBlock, OffloadConfigError
from revolta_offload.block_codec import decode_block, encode_block
from revolta_offload.cpu_tier import HostCopier
from revolta_offload.disk_tier import SUFFIX


def block(seed: int, layers: int = 2, int8: bool = False) -> HostBlock:
    g = torch.Generator().manual_seed(seed)
    shape = (layers, 2, 4, 8)
    if int8:
        return HostBlock({"key": torch.randint(-128, 127, shape, generator=g, dtype=torch.int8),
                          "value": torch.randint(-128, 127, shape, generator=g, dtype=torch.int8),
                          "key_scale": torch.rand(shape[:3], generator=g), "value_scale": torch.rand(shape[:3], generator=g)})
    return HostBlock({"key": torch.randn(shape, generator=g).half(), "value": torch.randn(shape, generator=g).half()})


def h(i: int) -> bytes:
    return i.to_bytes(32, "big")


def same(a: HostBlock, b: HostBlock) -> bool:
    return a.tensors.keys() == b.tensors.keys() and all(torch.equal(a.tensors[k], b.tensors[k]) for k in a.tensors)


@pytest.mark.parametrize("int8", [False, True])
def test_block_file_round_trip(int8):
    b = block(1, int8=int8)
    assert same(decode_block(b"".join(encode_block(h(1), "fp", b)), h(1), "fp"), b)


def test_block_file_rejects_damage_and_other_blocks():
    data = b"".join(encode_block(h(1), "fp", block(1)))
    flipped = bytearray(data)
    flipped[-5] ^= 0x40
    for bad, what in ((data[:-3], "checksum"), (bytes(flipped), "checksum"), (b"junk" * 20, "header")):
        with pytest.raises(CorruptBlockError, match=what):
            decode_block(bad, h(1), "fp")
    with pytest.raises(CorruptBlockError, match="another block"):
        decode_block(data, h(2), "fp")
    with pytest.raises(CorruptBlockError, match="another"):
        decode_block(data, h(1), "other-layout")


@pytest.mark.parametrize("entry", [
    {"dtype": "F16", "shape": [4], "data_offsets": [0, 100]},  # past the end
    {"dtype": "F16", "shape": [4], "data_offsets": [0, 6]},  # not the shape's size
    {"dtype": "Q4", "shape": [4], "data_offsets": [0, 8]},  # unknown dtype
])
def test_block_file_with_a_valid_checksum_but_bad_offsets_is_rejected(entry):
    """A payload whose checksum matches but whose header does not describe its bytes (a foreign writer)."""
    import hashlib
    import json

    from revolta_offload.block_codec import MAGIC

    meta = {"__metadata__": {"block_hash": h(1).hex(), "fingerprint": "fp"}, "key": entry}
    head = json.dumps(meta).encode()
    payload = len(head).to_bytes(8, "little") + head + bytes(8)
    with pytest.raises(CorruptBlockError, match="unreadable payload"):
        decode_block(MAGIC + hashlib.sha256(payload).digest() + payload, h(1), "fp")


def test_block_read_from_a_file_is_a_writable_view():
    b = block(3)
    got = decode_block(b"".join(encode_block(h(3), "fp", b)), h(3), "fp")
    assert same(got, b) and all(t.is_contiguous() for t in got.tensors.values())
    got.tensors["key"].add_(1)  # writable (a bytearray view), so the CPU tier may keep it as is


def test_cpu_tier_evicts_least_recently_used():
    size = block(0).nbytes
    tier = CpuTier(3 * size)
    for i in range(3):
        assert tier.put(h(i), block(i))
    assert tier.get(h(0)) is not None  # 0 is now the most recent
    tier.put(h(3), block(3))
    assert h(1) not in tier and all(h(i) in tier for i in (0, 2, 3))
    assert tier.nbytes == 3 * size and tier.stats()["evictions"] == 1
    assert not CpuTier(size - 1).put(h(9), block(9))  # larger than the whole tier
    with pytest.raises(ValueError, match="positive"):
        CpuTier(0)


def test_host_copies_are_compact_and_fall_back_to_pageable_memory_with_one_warning(monkeypatch, caplog):
    chunk = torch.arange(2 * 3 * 4 * 8, dtype=torch.float16).reshape(2, 3, 4, 8)  # [layers, n, ...]
    plain = HostCopier(pin=False)
    b = block(1)
    assert plain.block(b) is b
    copy = plain.copy(chunk[:, 1])
    assert torch.equal(copy, chunk[:, 1]) and copy.is_contiguous() and copy.untyped_storage().nbytes() == copy.nbytes
    if torch.cuda.is_available():  # no driver here otherwise; on a GPU, fail as when the OS locks no more memory
        real_empty = torch.empty

        def empty(*args, pin_memory: bool = False, **kwargs):
            if pin_memory:
                raise RuntimeError("CUDA error: out of memory")
            return real_empty(*args, **kwargs)

        monkeypatch.setattr(torch, "empty", empty)
    pinning = HostCopier(pin=True)
    copies = [pinning.copy(chunk[:, i]) for i in range(3)]
    assert all(torch.equal(c, chunk[:, i]) and c.is_contiguous() and not c.is_pinned() for i, c in enumerate(copies))
    assert pinning.block(b) is b and not pinning.pin  # no further attempts once pinning failed
    assert len(caplog.records) == 1 and "ordinary memory" in caplog.text


def test_disk_tier_survives_restart_and_stays_in_its_layout(tmp_path):
    tier = DiskTier(tmp_path, "layoutA", 1 << 20)
    for i in range(3):
        assert tier.put(h(i), block(i))
    again = DiskTier(tmp_path, "layoutA", 1 << 20)
    assert len(again) == 3 and again.nbytes == tier.nbytes
    assert same(again.get(h(2)), block(2))
    assert DiskTier(tmp_path, "layoutB", 1 << 20).get(h(2)) is None  # another model / dtype never sees it
    assert not list(tmp_path.rglob("*.tmp"))


def test_disk_tier_bounds_its_size_by_least_recent_use(tmp_path):
    one = sum(len(piece) for piece in encode_block(h(0), "fp", block(0)))
    tier = DiskTier(tmp_path, "fp", 3 * one)
    for i in range(3):
        tier.put(h(i), block(i))
    assert tier.get(h(0)) is not None
    tier.put(h(3), block(3))
    assert not tier.path_for(h(1)).exists() and h(1) not in tier
    assert all(tier.path_for(h(i)).exists() for i in (0, 2, 3))
    assert tier.nbytes <= 3 * one
    # a smaller cap at the next start trims the oldest files
    small = DiskTier(tmp_path, "fp", 2 * one)
    assert len(small) == 2 and not small.path_for(h(2)).exists()


def test_engines_sharing_a_directory_keep_it_within_its_size(tmp_path):
    """Each tier indexes the directory again as it writes (here at every write), so another engine's files count:
    the directory stays within the size, the least recently used files going first, whoever wrote them."""
    one = sum(len(piece) for piece in encode_block(h(0), "fp", block(0)))
    a = DiskTier(tmp_path, "fp", 3 * one, rescan_interval_s=0)
    b = DiskTier(tmp_path, "fp", 3 * one, rescan_interval_s=0)
    for i in range(3):
        a.put(h(i), block(i))
    assert a.get(h(0)) is not None  # a's 0 is used again: 1 and 2 are the oldest
    for i in (10, 11):
        b.put(h(i), block(i))
    on_disk = {p.name for p in tmp_path.glob("fp/*/*")}
    assert len(on_disk) == 3 and b.nbytes == 3 * one
    assert all(b.path_for(h(i)).exists() for i in (0, 10, 11))
    assert a.get(h(1)) is None and h(1) not in a  # removed by b: a reads a miss and forgets it
    a.put(h(12), block(12))  # a's own index now sees b's files and the directory stays at three
    assert len(list(tmp_path.glob("fp/*/*"))) == 3 and a.nbytes == 3 * one


def test_disk_tier_drops_a_damaged_file(tmp_path, caplog):
    tier = DiskTier(tmp_path, "fp", 1 << 20)
    tier.put(h(5), block(5))
    path = tier.path_for(h(5))
    path.write_bytes(path.read_bytes()[:-10])
    assert tier.get(h(5)) is None
    assert not path.exists() and tier.stats()["corrupt"] == 1 and len(tier) == 0
    assert "damaged" in caplog.text


def test_disk_tier_removes_temp_files_of_dead_writers_only(tmp_path):
    tier = DiskTier(tmp_path, "fp", 1 << 20)
    tier.put(h(1), block(1))
    sub = tier.path_for(h(1)).parent
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = sub / f"{h(1).hex()}{SUFFIX}.{int(dead.stdout)}.abcd1234.tmp"
    live = sub / f"{h(2).hex()}{SUFFIX}.{os.getppid()}.abcd1234.tmp"
    stale.write_bytes(b"partial")
    live.write_bytes(b"being written")
    again = DiskTier(tmp_path, "fp", 1 << 20)
    assert not stale.exists() and live.exists() and len(again) == 1


def test_disk_tier_fails_loudly_on_an_unusable_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(OffloadConfigError, match="cannot write KV offload files"):
        DiskTier(blocker, "fp", 1 << 20)
    with pytest.raises(OffloadConfigError, match="positive"):
        DiskTier(tmp_path, "fp", 0)


def test_a_failing_file_write_keeps_the_block_in_memory_and_the_writer_alive(tmp_path, caplog):
    from revolta_engine.worker.kv_cache import KVCacheSpec, allocate_kv_cache
    from revolta_offload import TieredOffloadConnector

    caches = allocate_kv_cache(KVCacheSpec(2, 2, 4, 8, torch.float32), 4, torch.device("cpu"))
    disk = DiskTier(tmp_path, "fp", 1 << 20)
    connector = TieredOffloadConnector(caches, torch.device("cpu"), CpuTier(1 << 20), disk)
    disk.path_for(h(1)).parent.parent.mkdir(parents=True, exist_ok=True)
    disk.path_for(h(1)).parent.write_text("a file where the block's folder should be")
    other = bytes([0xAB]) + bytes(31)  # another folder
    connector.save([h(1), other], [1, 2])
    connector.flush()
    assert "cannot write blocks" in caplog.text
    assert h(1) in connector.cpu and len(connector.lookup([h(1), other])) == 2
    assert other in disk and h(1) not in disk and connector.stats().blocks_saved == 2
    connector.close()


def test_lookup_reads_files_after_the_memory_hits_and_stops_at_a_damaged_one(tmp_path, caplog):
    """CPU hits first, then the files (read by the pool, in order, promoted to memory); a file damaged after
    the presence check ends the hit there, and no file past a missing block is read."""
    from revolta_engine.worker.kv_cache import KVCacheSpec, allocate_kv_cache
    from revolta_offload import TieredOffloadConnector

    caches = allocate_kv_cache(KVCacheSpec(2, 2, 4, 8, torch.float32), 4, torch.device("cpu"))
    disk = DiskTier(tmp_path, "fp", 1 << 20)
    cpu = CpuTier(1 << 20)
    connector = TieredOffloadConnector(caches, torch.device("cpu"), cpu, disk)
    blocks = {i: block(i) for i in range(8)}
    cpu.put(h(0), blocks[0])
    cpu.put(h(1), blocks[1])
    for i in (2, 3, 4, 5, 7):  # 6 is missing everywhere
        disk.put(h(i), blocks[i])
    cpu.put(h(3), blocks[3])  # in both tiers
    got = connector.lookup([h(i) for i in range(8)])
    assert len(got) == 6 and all(same(g, blocks[i]) for i, g in enumerate(got))
    assert h(2) in cpu and h(5) in cpu and h(7) not in cpu  # promoted, and 7 (past the miss) never read

    damaged = disk.path_for(h(4))
    damaged.write_bytes(damaged.read_bytes()[:-3])
    cpu2 = CpuTier(1 << 20)
    connector2 = TieredOffloadConnector(caches, torch.device("cpu"), cpu2, disk)
    got = connector2.lookup([h(i) for i in (2, 3, 4, 5)])
    assert [same(g, blocks[i]) for g, i in zip(got, (2, 3), strict=False)] == [True, True] and len(got) == 2
    assert "damaged" in caplog.text and h(4) not in disk
    connector.close()
    connector2.close()
    assert h(7) in disk and connector2.lookup([h(7)]) == []  # closed: no file is read any more


def test_cpu_tier_counts_pageable_blocks_at_their_size_and_rounds_pinned_ones():
    from revolta_offload.block_codec import _pow2_ceil

    assert [_pow2_ceil(n) for n in (1, 2, 3, 917504, 1 << 20)] == [1, 2, 4, 1 << 20, 1 << 20]
    b = block(1, layers=7)  # 7 * 2 * 4 * 8 fp16 values: not a power of two
    assert b.footprint == b.nbytes  # pageable: no rounding
    tier = CpuTier(3 * b.nbytes)
    for i in range(4):
        tier.put(h(i), block(i, layers=7))
    assert len(tier) == 3 and tier.nbytes == 3 * b.nbytes
