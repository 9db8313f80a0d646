"""Which native library a GPU gets, and what Volta mode changes: pure functions, no GPU needed."""

from __future__ import annotations

import pytest

from revolta_kernels import device_arch, envs, native
from revolta_kernels.device_arch import MODERN_LIB, VOLTA_LIB, choose_library, library_runs_on

BOTH = [f"/site/revolta_kernels/{MODERN_LIB}", f"/site/revolta_kernels/{VOLTA_LIB}"]


@pytest.mark.parametrize("capability", [(7, 0), (7, 2), (7, 5)])
def test_volta_and_turing_get_the_volta_library(capability):
    name, why = choose_library(capability, BOTH)
    assert name == VOLTA_LIB and f"{capability[0]}.{capability[1]}" in why


@pytest.mark.parametrize("capability", [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)])
def test_ampere_and_newer_get_the_modern_library(capability):
    assert choose_library(capability, BOTH)[0] == MODERN_LIB


def test_without_the_modern_library_newer_gpus_fall_back_to_the_volta_ptx():
    name, why = choose_library((9, 0), [VOLTA_LIB])
    assert name == VOLTA_LIB and "compute_70 PTX" in why


def test_volta_without_the_volta_library_gets_none_and_says_why():
    name, why = choose_library((7, 0), [MODERN_LIB])
    assert name is None and VOLTA_LIB in why and "CUDA 13" in why


def test_pre_volta_and_empty_installs_get_none():
    assert choose_library((6, 1), BOTH)[0] is None
    assert choose_library((9, 0), [])[0] is None


def test_no_gpu_still_names_a_library_that_loads():
    assert choose_library(None, BOTH)[0] == MODERN_LIB
    assert choose_library(None, [VOLTA_LIB])[0] == VOLTA_LIB
    assert choose_library(None, [])[0] is None


@pytest.mark.parametrize(("file", "archs", "capability", "runs"), [
    (VOLTA_LIB, "70,75", (7, 0), True),
    (VOLTA_LIB, "70,75", (7, 2), True),  # sm_70 SASS runs on 7.2
    (VOLTA_LIB, "70,75", (9, 0), True),  # compute_70 PTX, JIT-compiled
    (VOLTA_LIB, "75", (7, 0), False),
    (MODERN_LIB, "80,86,89,90", (8, 9), True),
    (MODERN_LIB, "90", (8, 0), False),  # only sm_90 SASS and compute_90 PTX
    (MODERN_LIB, "80,90", (10, 0), True),  # compute_90 PTX
    (MODERN_LIB, "", (9, 0), False),
])
def test_library_runs_on(file, archs, capability, runs):
    assert library_runs_on(file, archs, capability) is runs


def test_volta_library_is_recognised_by_its_archs():
    assert native.is_volta_library("70,75") and native.is_volta_library("75")
    assert not native.is_volta_library("70,90") and not native.is_volta_library("")


@pytest.mark.parametrize(("raw", "visible"), [
    (None, [(9, 0), (8, 0), (9, 0)]),
    ("0,2", [(9, 0), (9, 0)]),
    ("1", [(8, 0)]),
    ("2,7,0", [(9, 0)]),  # CUDA ignores everything from the first invalid index on
    ("", []),
    ("GPU-1234abcd", [(9, 0), (8, 0), (9, 0)]),  # UUIDs: cannot map, keep all (the lowest wins)
])
def test_visible_devices_filter_the_capabilities(raw, visible):
    assert device_arch.visible([(9, 0), (8, 0), (9, 0)], raw) == visible


def test_emulated_arch_parses_and_refuses(monkeypatch):
    for raw, arch in (("70", 70), ("7.0", 70), ("75", 75)):
        monkeypatch.setenv("REVOLTA_EMULATE_ARCH", raw)
        assert envs.EMULATE_ARCH.get() == arch
    monkeypatch.setenv("REVOLTA_EMULATE_ARCH", "80")
    with pytest.raises(ValueError, match="REVOLTA_EMULATE_ARCH"):
        envs.EMULATE_ARCH.get()


def test_volta_mode_reports_70_whatever_the_gpu(monkeypatch):
    monkeypatch.setattr(device_arch, "nvml_capabilities", lambda: [(9, 0)])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("REVOLTA_EMULATE_ARCH", raising=False)
    assert device_arch.effective_arch() == 90 and device_arch.effective_arch((8, 6)) == 86
    assert device_arch.effective_capability()[0] == (9, 0)
    monkeypatch.setenv("REVOLTA_EMULATE_ARCH", "70")
    assert device_arch.effective_arch() == 70 and device_arch.effective_arch((9, 0)) == 70
    cap, how = device_arch.effective_capability()
    assert cap == (7, 0) and "REVOLTA_EMULATE_ARCH=70" in how and "9.0" in how
    assert choose_library(cap, BOTH)[0] == VOLTA_LIB


def test_no_nvml_means_no_gpu(monkeypatch):
    def fail() -> list[tuple[int, int]]:
        raise device_arch.NvmlError("no NVML (test)")

    monkeypatch.setattr(device_arch, "nvml_capabilities", fail)
    monkeypatch.delenv("REVOLTA_EMULATE_ARCH", raising=False)
    assert device_arch.device_capability() == (None, "no NVML (test)")
    assert device_arch.effective_arch() is None


def test_loader_names_the_file_and_the_reason(monkeypatch, tmp_path):
    """With both files present the loader picks by capability and says so; a file that fails to load is
    reported with its path (here: not an ELF file)."""
    for name in (MODERN_LIB, VOLTA_LIB):
        (tmp_path / name).write_bytes(b"not an ELF file")
    monkeypatch.delenv("REVOLTA_NATIVE_LIB", raising=False)
    monkeypatch.delenv("REVOLTA_DISABLE_NATIVE", raising=False)
    monkeypatch.setattr(native, "_candidates", lambda: [tmp_path / MODERN_LIB, tmp_path / VOLTA_LIB])
    monkeypatch.setattr(device_arch, "nvml_capabilities", lambda: [(9, 0)])
    monkeypatch.setenv("REVOLTA_EMULATE_ARCH", "70")
    lib, status, path = native._load()
    assert lib is None and path is None and str(tmp_path / VOLTA_LIB) in status
