"""native_status() must say truthfully whether the CUDA kernels are loaded, and how to get them if not."""

from __future__ import annotations

import _ctypes
from pathlib import Path

import pytest

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


def test_explicit_missing_library_fails_loudly(monkeypatch, tmp_path):
    path = tmp_path / "librevolta_native.so"
    monkeypatch.setenv("REVOLTA_NATIVE_LIB", str(path))
    with pytest.raises(native.NativeLibraryError, match="no such file") as info:
        native._load()
    assert str(path) in str(info.value)


def test_explicit_unloadable_library_fails_loudly(monkeypatch, tmp_path):
    path = tmp_path / "librevolta_native.so"
    path.write_bytes(b"not an ELF file")
    monkeypatch.setenv("REVOLTA_NATIVE_LIB", str(path))
    with pytest.raises(native.NativeLibraryError, match="failed to load") as info:
        native._load()
    assert str(path) in str(info.value) and "REVOLTA_CUDA_ARCHS" in str(info.value)


def test_explicit_library_without_the_entry_points_fails_loudly(monkeypatch):
    other = Path(_ctypes.__file__)  # a shared object that loads but is not ours
    monkeypatch.setenv("REVOLTA_NATIVE_LIB", str(other))
    with pytest.raises(native.NativeLibraryError, match="lacks revolta_"):
        native._load()


def test_found_but_unusable_library_falls_back_with_the_reason(monkeypatch, tmp_path):
    path = tmp_path / "librevolta_native.so"
    path.write_bytes(b"not an ELF file")
    monkeypatch.delenv("REVOLTA_NATIVE_LIB", raising=False)
    monkeypatch.delenv("REVOLTA_DISABLE_NATIVE", raising=False)
    monkeypatch.delenv("REVOLTA_EMULATE_ARCH", raising=False)  # Volta mode would refuse the file unopened
    monkeypatch.setattr(native, "_candidates", lambda: [path])
    lib, status, _ = native._load()
    assert lib is None
    assert status.startswith("reference only") and str(path) in status and "REVOLTA_CUDA_ARCHS" in status


def test_no_library_found_is_reported(monkeypatch, tmp_path):
    monkeypatch.delenv("REVOLTA_NATIVE_LIB", raising=False)
    monkeypatch.delenv("REVOLTA_DISABLE_NATIVE", raising=False)
    monkeypatch.setattr(native, "_candidates", lambda: [tmp_path / "librevolta_native.so"])
    lib, status, _ = native._load()
    assert lib is None
    assert status.startswith("reference only") and "REVOLTA_CUDA_ARCHS" in status


def test_disable_switch(monkeypatch):
    monkeypatch.setenv("REVOLTA_DISABLE_NATIVE", "1")
    lib, status, _ = native._load()
    assert lib is None and "REVOLTA_DISABLE_NATIVE" in status


class _LibWithLayouts:
    """A stand-in for the native library's revolta_struct_size: the sizes it was built with."""

    def __init__(self, sizes: dict[bytes, int]) -> None:
        self.sizes = sizes

    def revolta_struct_size(self, name: bytes) -> int:
        return self.sizes.get(name, -1)


def test_parameter_block_layouts_must_match_the_mirrors(monkeypatch):
    """A library whose parameter blocks differ from this package's ctypes mirrors (built from other sources) is
    refused: its kernels would read shifted fields."""
    import ctypes

    from revolta_kernels.native_moe import MoeCombineParams

    good = _LibWithLayouts({b"AttnParams": ctypes.sizeof(native.AttnParams),
                            b"MoeCombineParams": ctypes.sizeof(MoeCombineParams)})
    assert native._layout_mismatch(good, (native.AttnParams, MoeCombineParams)) is None
    old = _LibWithLayouts({b"AttnParams": ctypes.sizeof(native.AttnParams), b"MoeCombineParams": 72})
    why = native._layout_mismatch(old, (native.AttnParams, MoeCombineParams))
    assert why is not None and "MoeCombineParams is 72 bytes" in why and str(ctypes.sizeof(MoeCombineParams)) in why
    unknown = native._layout_mismatch(_LibWithLayouts({}), (native.DecodeRope,))  # a block the library lacks
    assert unknown is not None and "DecodeRope is -1 bytes" in unknown
    monkeypatch.setattr(native, "LIB", old)
    with pytest.raises(native.NativeLibraryError, match="MoeCombineParams is 72 bytes"):
        native.bind({}, (MoeCombineParams,))
