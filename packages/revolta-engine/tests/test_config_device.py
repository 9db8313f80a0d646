"""Device choice at engine startup: a CUDA request without a GPU fails at once, and a GPU engine without the native
kernels says so (and why) instead of silently running the torch reference."""

from __future__ import annotations

import pytest
import torch

from revolta_engine.config import native_kernels_note, resolve_device
from revolta_engine.errors import InvalidRequestError


def test_gpu_engine_without_native_kernels_names_the_reason():
    note = native_kernels_note(torch.device("cuda", 0), False, "reference only: libx.so failed to load")
    assert note is not None
    assert "libx.so failed to load" in note and "cuda:0" in note and "reference" in note


def test_no_note_where_the_reference_is_the_path_or_the_kernels_load():
    assert native_kernels_note(torch.device("cpu"), False, "reference only") is None
    assert native_kernels_note(torch.device("cuda", 0), True, "native: CUDA kernels loaded") is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a visible GPU")
def test_cuda_requested_without_a_gpu_is_a_clear_error():
    with pytest.raises(InvalidRequestError, match="no CUDA GPU is visible"):
        resolve_device("cuda")
    assert resolve_device("auto") == torch.device("cpu")
