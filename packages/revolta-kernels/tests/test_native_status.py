"""native_status() must say truthfully whether the CUDA kernels are loaded, and how to get them if not."""

from __future__ import annotations

import revolta_kernels
from revolta_kernels import native


def test_status_matches_loaded_library():
    status = revolta_kernels.native_status()
    if revolta_kernels.native_available():
        assert status.startswith("native:") and "sm_" in status
        assert native.LIB is not None
    else:
        assert status.startswith("reference only")
        assert "REVOLTA_CUDA_ARCHS" in status  # tells the user how to build


def test_missing_library_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("REVOLTA_NATIVE_LIB", str(tmp_path / "librevolta_native.so"))
    lib, status = native._load()
    assert lib is None
    assert status.startswith("reference only") and "REVOLTA_CUDA_ARCHS" in status


def test_disable_switch(monkeypatch):
    monkeypatch.setenv("REVOLTA_DISABLE_NATIVE", "1")
    lib, status = native._load()
    assert lib is None and "REVOLTA_DISABLE_NATIVE" in status
