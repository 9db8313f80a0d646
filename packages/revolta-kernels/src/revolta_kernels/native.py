"""Finding and loading the native CUDA library through ctypes: ``librevolta_native.so`` (sm_80+) or
``librevolta_native_sm70.so`` (sm_70/75 + compute_70 PTX), whichever fits the GPU (:mod:`revolta_kernels.device_arch`).

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
from revolta_kernels.device_arch import (
    MODERN_LIB,
    VOLTA_LIB,
    choose_library,
    effective_capability,
    emulated_arch,
    library_runs_on,
)

BUILD_HINT = (
    "to build the CUDA kernels, run e.g. `REVOLTA_CUDA_ARCHS=90 uv sync --reinstall-package revolta-kernels` "
    "(use your GPU's compute capability; 70/75 need a CUDA 11.8/12.x nvcc, see docs/kernels.md)"
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
    """Every place a native library may be, in search order: this package's directory, then the same package
    directory on each ``sys.path`` entry (editable installs put build outputs in site-packages)."""
    here = Path(__file__).resolve().parent
    dirs = [here] + [Path(p) / "revolta_kernels" for p in sys.path if p]
    seen: list[Path] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return [d / name for d in seen for name in (MODERN_LIB, VOLTA_LIB)]


def _available() -> dict[str, Path]:
    """Library file name -> the first existing path of that name among :func:`_candidates`."""
    found: dict[str, Path] = {}
    for path in _candidates():
        if path.is_file():
            found.setdefault(path.name, path)
    return found


def _build_note() -> str | None:
    """What the build recorded about the native libraries (native_build.txt), on one line."""
    for lib in _candidates():
        note = lib.with_name("native_build.txt")
        if note.is_file():
            return "; ".join(line.strip() for line in note.read_text().splitlines() if line.strip())
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
    return lib, f"native: CUDA kernels loaded from {path} (built for sm_{archs_of(lib).replace(',', ', sm_')})"


def archs_of(lib: ctypes.CDLL) -> str:
    """The archs a loaded library was built for, as ``revolta_build_archs()`` says (e.g. ``"70,75"``)."""
    return lib.revolta_build_archs().decode()


def is_volta_library(archs: str) -> bool:
    """True for a library built only for archs before sm_80 (the Volta/Turing one): its device code has no
    programmatic dependent launch, and the host must choose as on a V100."""
    built = [int(a.rstrip("af")) for a in archs.split(",") if a.strip().rstrip("af").isdigit()]
    return bool(built) and max(built) < 80


def _load_explicit(explicit: str) -> tuple[ctypes.CDLL | None, str, Path | None]:
    path = Path(explicit)
    if not path.is_file():
        raise NativeLibraryError(
            f"REVOLTA_NATIVE_LIB={explicit}: no such file; unset it to use the installed kernels "
            f"(or the references), or point it at a {MODERN_LIB} or {VOLTA_LIB}"
        )
    lib, status = _open(path)
    if lib is None:
        raise NativeLibraryError(f"REVOLTA_NATIVE_LIB: {status}; {BUILD_HINT}")
    return lib, f"{status}; named by REVOLTA_NATIVE_LIB", path


def _load() -> tuple[ctypes.CDLL | None, str, Path | None]:
    """The library to use, the status line that says which and why, and its path."""
    if envs.DISABLE_NATIVE.get():
        return None, "reference only: native kernels disabled by REVOLTA_DISABLE_NATIVE=1", None
    explicit = envs.NATIVE_LIB.get()
    if explicit:
        return _load_explicit(explicit)
    available = _available()
    if not available:
        note = _build_note()
        why = note if note else "the native library was not built with this install"
        return None, f"reference only ({why}); {BUILD_HINT}", None
    capability, how = effective_capability()
    name, why = choose_library(capability, available)
    if name is None:
        return None, f"reference only: {why} ({how}); {BUILD_HINT}", None
    lib, status = _open(available[name])
    if lib is not None and capability is not None and not library_runs_on(name, archs_of(lib), capability):
        if name == MODERN_LIB and VOLTA_LIB in available:  # e.g. built for sm_90 only, on an A100
            fallback, fstatus = _open(available[VOLTA_LIB])
            if fallback is not None:
                return fallback, (f"{fstatus}; chosen because {MODERN_LIB} (sm_{archs_of(lib)}) has no code for "
                                  f"compute capability {capability[0]}.{capability[1]}: the compute_70 PTX is "
                                  f"compiled by the driver ({how})"), available[VOLTA_LIB]
        return None, (f"reference only: {available[name]} was built for sm_{archs_of(lib)}, which has no code for "
                      f"compute capability {capability[0]}.{capability[1]} ({how}); {BUILD_HINT}"), None
    if lib is None:
        return None, f"reference only: {status}; {BUILD_HINT}", None
    return lib, f"{status}; chosen for {why} ({how})", available[name]


LIB, STATUS, LIB_PATH = _load()
VOLTA = LIB is not None and is_volta_library(archs_of(LIB))
# Host code chooses as on a V100 (no fragment-layout kernels, no PDL) with the Volta library or in Volta mode.
VOLTA_CHOICES = VOLTA or emulated_arch() is not None
if LIB is not None and (VOLTA or not envs.PDL.get()):
    LIB.revolta_set_pdl(0)  # the Volta library's device code has no PDL wait: never launch it with PDL


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
