"""The KV offload layout fingerprint: stored blocks are reused only by an engine whose blocks hold the same bytes."""

from __future__ import annotations

import os

import torch

from revolta_engine.engine.kv_offload_setup import layout_fingerprint, model_identity
from revolta_engine.worker.kv_cache import KVCacheSpec

SPEC = KVCacheSpec(4, 2, 16, 64, torch.float16)


def write_model(root, weights: bytes = b"w" * 64) -> None:
    root.mkdir(exist_ok=True)
    (root / "config.json").write_text('{"model_type": "llama"}')
    (root / "model.safetensors").write_bytes(weights)


def fp(root, spec=SPEC, dtype=torch.float16, load_format="auto", seed=0, act="none") -> str:
    return layout_fingerprint(model_identity(root, load_format, seed), spec, dtype, 1, act)


def test_same_model_and_layout_same_fingerprint(tmp_path):
    write_model(tmp_path / "m")
    assert fp(tmp_path / "m") == fp(tmp_path / "m")


def test_anything_that_changes_block_bytes_changes_the_fingerprint(tmp_path):
    m = tmp_path / "m"
    write_model(m)
    base = fp(m)
    assert fp(m, spec=KVCacheSpec(4, 2, 16, 64, torch.int8)) != base
    assert fp(m, spec=KVCacheSpec(4, 2, 32, 64, torch.float16)) != base
    assert fp(m, dtype=torch.bfloat16) != base
    assert fp(m, act="int8") != base
    assert fp(m, load_format="dummy") != fp(m, load_format="dummy", seed=1)
    other = tmp_path / "other"
    write_model(other)
    assert fp(other) != base  # another checkpoint directory
    write_model(m, b"x" * 65)  # the weights were replaced
    assert fp(m) != base


def test_a_touched_config_changes_the_fingerprint(tmp_path):
    m = tmp_path / "m"
    write_model(m)
    base = fp(m)
    st = (m / "config.json").stat()
    os.utime(m / "config.json", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert fp(m) != base
