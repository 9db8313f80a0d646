"""native_quant's remembered tuning and its int8-activation switch, against a stand-in for the native library (the
flag arithmetic only: which arguments reach ``revolta_quant_tune``; test_quant_xq_gpu.py runs the real one)."""

from __future__ import annotations

import pytest

from revolta_kernels import native, native_quant, native_quant_tune

DEFAULTS = (0, 0, 1, -1, -1, -1, 0, 0, -1, -1)  # tune()'s defaults in revolta_quant_tune's argument order
FLAGS = 9  # gemv_flags' position


class FakeLib:
    """Records the launch-tuning calls; they succeed unless ``fail`` is set."""

    def __init__(self) -> None:
        self.quant: list[tuple[int, ...]] = []
        self.fail = False

    def revolta_quant_tune(self, *args: int) -> int:
        self.quant.append(args)
        return 1 if self.fail else 0

    def revolta_error_string(self, err: int) -> bytes:
        return b"invalid argument"

    def revolta_dense_gemv_tune(self, *args: int) -> int:
        return 0


@pytest.fixture
def lib(monkeypatch):
    fake = FakeLib()
    monkeypatch.setattr(native, "LIB", fake)
    monkeypatch.setattr(native_quant_tune, "_tuned", {})
    monkeypatch.setattr(native_quant_tune, "_dense_tuning", [-1, 0, 0])
    return fake


def test_switch_keeps_the_other_overrides(lib):
    native_quant.tune(gemv_warps=4, gemv_full=0, gemv_flags=2)
    native_quant.set_int8_activations(True)
    assert lib.quant[-1] == (4, 0, 1, -1, -1, -1, 0, 0, 0, 2 | native_quant.GEMV_FLAG_INT8X)
    assert native_quant.int8_activations()
    native_quant.set_int8_activations(False)
    assert lib.quant[-1] == (4, 0, 1, -1, -1, -1, 0, 0, 0, 2)
    assert not native_quant.int8_activations()


def test_default_flags_gain_and_lose_the_bit(lib):
    assert not native_quant.int8_activations()  # nothing tuned yet: the built-in flags
    native_quant.set_int8_activations(True)
    on = native_quant.GEMV_DEFAULT_FLAGS | native_quant.GEMV_FLAG_INT8X
    assert lib.quant[-1] == (*DEFAULTS[:FLAGS], on)
    native_quant.set_int8_activations(False)
    assert lib.quant[-1][FLAGS] == native_quant.GEMV_DEFAULT_FLAGS
    native_quant.tune()
    native_quant.set_int8_activations(False)  # off over -1 stays -1 (the built-in choice)
    assert lib.quant[-1] == DEFAULTS and not native_quant.int8_activations()


def test_tune_replaces_what_is_remembered(lib):
    native_quant.tune(gemv_flags=6 | native_quant.GEMV_FLAG_INT8X)
    assert native_quant.int8_activations()
    native_quant.tune(gemv_share=2)
    assert not native_quant.int8_activations()
    native_quant.set_int8_activations(True)
    assert lib.quant[-1] == (0, 0, 1, -1, -1, -1, 2, 0, -1, 6 | native_quant.GEMV_FLAG_INT8X)


def test_positional_environment_spec_is_remembered(lib):
    """REVOLTA_QUANT_TUNE's positional fields go through tune(), so the switch keeps them too."""
    native_quant.tune(*[8, 4, 2, 1, 0, 16, 1, 4, 0, 2])
    native_quant.set_int8_activations(True)
    assert lib.quant[-1] == (8, 4, 2, 1, 0, 16, 1, 4, 0, 2 | native_quant.GEMV_FLAG_INT8X)


def test_a_failed_tune_is_not_remembered(lib):
    native_quant.tune(gemv_warps=4)
    lib.fail = True
    with pytest.raises(RuntimeError, match="invalid argument"):
        native_quant.tune(gemv_warps=8, gemv_flags=6 | native_quant.GEMV_FLAG_INT8X)
    lib.fail = False
    assert not native_quant.int8_activations()
    native_quant.set_int8_activations(False)
    assert lib.quant[-1][0] == 4


def test_needs_the_native_library(monkeypatch):
    monkeypatch.setattr(native, "LIB", None)
    with pytest.raises(AssertionError):
        native_quant.set_int8_activations(True)
    with pytest.raises(AssertionError):
        native_quant.int8_activations()
