"""``revolta doctor``'s kernels report: toolkits, the native libraries and whether they fit the GPU (no GPU needed)."""

from __future__ import annotations

from revolta_cli import doctor_kernels
from revolta_kernels.device_arch import MODERN_LIB, VOLTA_LIB

ARCHS = {MODERN_LIB: "80,86,89,90", VOLTA_LIB: "70,75"}


def _text(lines: list[tuple[str, str]]) -> str:
    return "\n".join(f"{name}: {value}" for name, value in lines)


def test_no_gpu_is_said_plainly():
    text = _text(doctor_kernels.match_lines(ARCHS, None, None, "reference only"))
    assert "no GPU visible" in text and "sm_70, sm_75" in text and "sm_80, sm_86" in text


def test_each_gpu_gets_the_library_with_its_code():
    text = _text(doctor_kernels.match_lines(ARCHS, [(7, 0), (9, 0)], None, "native: ..."))
    assert f"GPU 0 (7.0): {VOLTA_LIB}: has code for it" in text
    assert f"GPU 1 (9.0): {MODERN_LIB}: has code for it" in text


def test_a_library_without_code_for_the_gpu_is_flagged():
    text = _text(doctor_kernels.match_lines({MODERN_LIB: "90"}, [(8, 0)], None, "native: ..."))
    assert "NO code for it" in text


def test_volta_mode_matches_as_a_v100():
    text = _text(doctor_kernels.match_lines(ARCHS, [(9, 0)], 70, "native: ..."))
    assert "REVOLTA_EMULATE_ARCH=70" in text and f"GPU 0 (9.0): {VOLTA_LIB}: has code for it" in text


def test_toolkits_say_what_they_can_build():
    text = _text(doctor_kernels.toolkit_lines({"/usr/lib/nvidia-cuda-toolkit/bin/nvcc": "11.8",
                                               "/usr/local/cuda-13.0/bin/nvcc": "13.0", "/broken/nvcc": None}))
    assert "CUDA 11.8: builds the Volta library" in text and "CUDA 13.0: builds the sm_80+ library" in text
    assert "does not run" in text
    assert "none found" in _text(doctor_kernels.toolkit_lines({}))


def test_report_runs_on_this_machine():
    lines: list[tuple[str, object]] = []
    doctor_kernels.report(lambda name, value: lines.append((name, value)))
    names = [name for name, _ in lines]
    assert "nvcc" in names and "driver" in names and "loaded" in names
