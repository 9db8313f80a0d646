"""Finding and loading the native CUDA library (``librevolta_native.so``) through ctypes.

The library has a plain C ABI (raw device pointers plus a ``cudaStream_t``) and links only the CUDA
runtime, so it works with any torch build. Where it is missing or cannot load, every op keeps using its
pure-torch reference and :func:`status` says why - except when ``REVOLTA_NATIVE_LIB`` names the library
explicitly: then a missing or unusable file raises :class:`NativeLibraryError` at import, because a user who
points at a library wants those kernels, not a silent fall-back to the (much slower) references.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterable
from pathlib import Path

from revolta_kernels import envs

LIB_NAME = "librevolta_native.so"
BUILD_HINT = (
    "to build the CUDA kernels, run e.g. `REVOLTA_CUDA_ARCHS=90 uv sync --reinstall-package revolta-kernels` "
    "(use your GPU's compute capability; 70 needs a CUDA 12.x nvcc)"
)

_c_int, _c_float, _c_ll, _ptr = ctypes.c_int, ctypes.c_float, ctypes.c_longlong, ctypes.c_void_p


class NativeLibraryError(RuntimeError):
    """The library that ``REVOLTA_NATIVE_LIB`` names is missing, fails to load, or lacks an entry point."""


class AttnParams(ctypes.Structure):
    """Mirror of ``revolta::AttnParams`` in csrc/attention.cuh (field order and types must match)."""

    _fields_ = [
        ("q", _ptr),
        ("out", _ptr),
        ("k_cache", _ptr),
        ("v_cache", _ptr),
        ("k_scales", _ptr),
        ("v_scales", _ptr),
        ("block_tables", _ptr),
        ("context_lens", _ptr),
        ("query_start_loc", _ptr),
        ("part_o", _ptr),
        ("part_ml", _ptr),
        ("num_tokens", _c_int),
        ("num_heads", _c_int),
        ("num_kv_heads", _c_int),
        ("block_size", _c_int),
        ("max_blocks", _c_int),
        ("num_splits", _c_int),
        ("scale_log2", _c_float),
        ("block_shift", _c_int),
        ("counters", _ptr),
        ("split_tokens", _c_int),
    ]


class DecodeRope(ctypes.Structure):
    """Mirror of ``revolta::DecodeRope`` in csrc/attention.cuh (field order and types must match)."""

    _fields_ = [
        ("q", _ptr),
        ("k", _ptr),
        ("v", _ptr),
        ("q_tok_stride", _c_ll),
        ("q_head_stride", _c_ll),
        ("k_tok_stride", _c_ll),
        ("k_head_stride", _c_ll),
        ("v_tok_stride", _c_ll),
        ("v_head_stride", _c_ll),
        ("positions", _ptr),
        ("cos_sin", _ptr),
        ("slots", _ptr),
        ("rot_dim", _c_int),
        ("neox", _c_int),
    ]


_SIGNATURES: dict[str, list] = {
    "revolta_paged_attention": [ctypes.POINTER(AttnParams), _c_int, _c_int, _c_int, _c_int, _c_int, _ptr],
    "revolta_attention_blocks_per_sm": [_c_int, _c_int, _c_int, _c_int, ctypes.POINTER(_c_int)],
    "revolta_mma_layout_probe": [ctypes.POINTER(_c_int), ctypes.POINTER(_c_int)],
    "revolta_set_attention_variant": [_c_int, _c_int],
    "revolta_set_decode_vec": [_c_int],
    "revolta_pdl_on": [],
    "revolta_set_pdl": [_c_int],
    "revolta_rope_paged_decode": [
        ctypes.POINTER(AttnParams), ctypes.POINTER(DecodeRope), _c_int, _c_int, ctypes.POINTER(_c_int), _ptr,
    ],
    "revolta_rms_norm": [_ptr, _ptr, _ptr, _c_int, _c_int, _c_float, _c_int, _c_int, _ptr],
    "revolta_fused_add_rms_norm": [_ptr] * 5 + [_c_int, _c_int, _c_float, _c_int, _c_int, _ptr],
    "revolta_silu_and_mul": [_ptr, _ptr, _c_int, _c_int, _c_int, _ptr],
    "revolta_argmax_rows": [_ptr, _ptr, _c_int, _c_int, _ptr, _ptr],
    "revolta_sigmoid_gate_mul": [_ptr, _ptr, _ptr, _c_int, _c_int, _c_int, _c_ll, _c_ll, _c_int, _ptr],
    "revolta_rotary_embedding": [_ptr] * 6 + [_c_int] * 6 + [_c_ll] * 4 + [_c_int, _c_int, _ptr],
    "revolta_rotary_and_cache": [_ptr] * 6 + [_c_int] + [_ptr] * 5 + [_c_int] * 6 + [_c_ll] * 6
    + [_c_int, _ptr, _ptr, _c_float, _c_int, _c_int, _c_int, _ptr],
    "revolta_reshape_and_cache": [_ptr] * 7 + [_c_int] * 4 + [_c_ll] * 4 + [_c_int, _c_int, _ptr],
}


def _candidates() -> list[Path]:
    env = envs.NATIVE_LIB.get()
    if env:
        return [Path(env)]
    here = Path(__file__).resolve().parent
    # Editable installs put build outputs in site-packages rather than next to the sources.
    dirs = [here] + [Path(p) / "revolta_kernels" for p in sys.path if p]
    seen: list[Path] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return [d / LIB_NAME for d in seen]


def _build_note() -> str | None:
    for lib in _candidates():
        note = lib.with_name("native_build.txt")
        if note.is_file():
            return note.read_text().strip()
    return None


def _missing(lib: ctypes.CDLL, names: Iterable[str]) -> list[str]:
    """The entry points among ``names`` that ``lib`` lacks."""
    return [name for name in names if not hasattr(lib, name)]


def _set_types(lib: ctypes.CDLL, signatures: dict[str, list]) -> None:
    """Give each entry point in ``signatures`` its argument types; every one returns an int error code."""
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = _c_int


def _layout_mismatch(lib: ctypes.CDLL, structs: Iterable[type[ctypes.Structure]]) -> str | None:
    """Why the library's parameter blocks differ from these ctypes mirrors (None: they match in size)."""
    for struct in structs:
        size = lib.revolta_struct_size(struct.__name__.encode())
        if size != ctypes.sizeof(struct):
            return (f"its {struct.__name__} is {size} bytes but this package passes {ctypes.sizeof(struct)} "
                    f"(the library was built from other sources; rebuild it from this checkout)")
    return None


def _open(path: Path) -> tuple[ctypes.CDLL | None, str]:
    """The library at ``path`` with every entry point typed, or None and why it cannot be used."""
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        return None, f"{path} exists but failed to load ({exc})"
    missing = _missing(lib, (*_SIGNATURES, "revolta_error_string", "revolta_build_archs", "revolta_struct_size"))
    if missing:
        return None, f"{path} lacks {', '.join(missing[:3])} (built from older or other sources)"
    _set_types(lib, _SIGNATURES)
    lib.revolta_error_string.argtypes = [_c_int]
    lib.revolta_error_string.restype = ctypes.c_char_p
    lib.revolta_build_archs.restype = ctypes.c_char_p
    lib.revolta_struct_size.argtypes = [ctypes.c_char_p]
    lib.revolta_struct_size.restype = _c_int
    mismatch = _layout_mismatch(lib, (AttnParams, DecodeRope))
    if mismatch:
        return None, f"{path}: {mismatch}"
    archs = lib.revolta_build_archs().decode()
    return lib, f"native: CUDA kernels loaded from {path} (built for sm_{archs.replace(',', ', sm_')})"


def _load() -> tuple[ctypes.CDLL | None, str]:
    if envs.DISABLE_NATIVE.get():
        return None, "reference only: native kernels disabled by REVOLTA_DISABLE_NATIVE=1"
    explicit = envs.NATIVE_LIB.get()
    for path in _candidates():
        if not path.is_file():
            if explicit:
                raise NativeLibraryError(
                    f"REVOLTA_NATIVE_LIB={explicit}: no such file; unset it to use the installed kernels "
                    f"(or the references), or point it at a librevolta_native.so"
                )
            continue
        lib, status = _open(path)
        if lib is None and explicit:
            raise NativeLibraryError(f"REVOLTA_NATIVE_LIB: {status}; {BUILD_HINT}")
        return lib, status if lib is not None else f"reference only: {status}; {BUILD_HINT}"
    note = _build_note()
    why = note if note else "the native library was not built with this install"
    return None, f"reference only ({why}); {BUILD_HINT}"


LIB, STATUS = _load()
if LIB is not None and not envs.PDL.get():
    LIB.revolta_set_pdl(0)


def bind(signatures: dict[str, list], structs: Iterable[type[ctypes.Structure]] = ()) -> bool:
    """Give the loaded library's entry points in ``signatures`` their argument types (each returns an int
    error code); False, binding nothing, when the library is missing or lacks one of them (an older build).
    Raises :class:`NativeLibraryError` when it lays out one of ``structs`` (the parameter blocks these entry points
    take) differently from its ctypes mirror: its kernels would read shifted fields."""
    if LIB is None or _missing(LIB, signatures):
        return False
    mismatch = _layout_mismatch(LIB, structs)
    if mismatch:
        raise NativeLibraryError(f"native library: {mismatch}; {BUILD_HINT}")
    _set_types(LIB, signatures)
    return True


def check(err: int) -> None:
    """Raise a RuntimeError naming the CUDA error if a native call failed."""
    if err != 0:
        assert LIB is not None
        raise RuntimeError(
            f"revolta native kernel failed: {LIB.revolta_error_string(err).decode()} (code {err})"
        )
