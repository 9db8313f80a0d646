"""The kernels tools/check_volta.py checks: every instantiation the library's launchers use, per translation unit.

Each entry names a kernel with its full template arguments (as the demangled symbol spells them), whether it
claims tensor cores (its SASS must hold HMMA) or dp4a (IDP), and where its dynamic shared memory comes from: a
``__device__`` constant the launch configuration also uses (``smem_expr``) or a fixed launch size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

VOLTA_SMEM = 96 * 1024  # Volta's shared memory per block
KINDS = {0: "fp16", 1: "int8", 2: "fp8e4m3", 3: "fp8e5m2"}
DTYPES = {"__half": "fp16", "__nv_bfloat16": "bf16", "float": "fp32"}
MOE_DYNAMIC_SMEM = 45 * 1024  # the MoE launchers refuse more (H or K * I + Is floats, kMoeMaxSmemFloats)


@dataclass
class Kernel:
    """One kernel instantiation the library launches, and what it claims."""

    name: str  # readable name for the table
    expr: str  # C++ name of the instantiation, full template arguments
    tensor_cores: bool
    smem_expr: str | None = None  # __device__ variable holding the dynamic shared memory its launch asks for
    dp4a: bool = False  # claims integer dot products: its SASS must hold IDP (dp4a)
    smem_dynamic: int = 0


def attention_kernels() -> list[Kernel]:
    """Every instantiation attention_*.cu and api.cu launch (attention, norms, rotary, cache, sampling)."""
    ks: list[Kernel] = []
    for d in (64, 128, 256):
        for kind, kname in KINDS.items():
            esz = 2 if kind == 0 else 1
            nch = 64 * (d * esz // 16) // 128
            stages = 1 if nch >= 8 else 8 // nch
            minb = 3 if d <= 128 else 2
            args = f"{d}, {kind}, 4, 64, {stages}"
            ks.append(
                Kernel(
                    f"decode d{d} {kname}",
                    f"&revolta::paged_decode_kernel<{args}, {minb}, 16>",
                    True,
                    f"&revolta::decode_smem_bytes<{args}, 16>",
                )
            )
            if kind != 0 and d == 128:  # <= 8 rows of one-byte KV: 8x32x16 WMMA, 128-key tiles
                nch8 = 128 * (d // 16) // 128
                args = f"{d}, {kind}, 4, 128, {1 if nch8 >= 8 else 8 // nch8}"
                ks.append(
                    Kernel(
                        f"decode-8row d{d} {kname}",
                        f"&revolta::paged_decode_kernel<{args}, 2, 8>",
                        True,
                        f"&revolta::decode_smem_bytes<{args}, 8>",
                    )
                )
            rf, bn = (1, 32) if d == 256 else (2, 32 if d == 128 else 64)
            args = f"{d}, {kind}, 4, {rf}, {bn}"
            ks.append(
                Kernel(
                    f"prefill d{d} {kname}",
                    f"&revolta::paged_prefill_kernel<{args}, true>",
                    True,
                    f"&revolta::prefill_smem_bytes<{args}>",
                )
            )
        if d <= 128:  # mma kernels (run where the fragment layout probe passes; compiled everywhere)
            for kind, kname in KINDS.items():
                if kind != 0:
                    for rows8 in ("true", "false"):
                        ks.append(_decode_mma(f"decode-frag d{d} {kname} rows{8 if rows8 == 'true' else 16}",
                                               d, kind, 4, 2, 2, rows8, "true"))
                cfg = (8, 2, 48, "false") if (d, kind) == (128, 0) else (4, 2, 32, "true")
                split = 1 if (d, kind) == (128, 0) else 0
                ks.append(_prefill_mma(f"prefill-frag d{d} {kname}", d, kind, *cfg, 1, "false", split))
    # tuning alternatives (attention_decode.cu / attention_prefill.cu, variants 3+)
    for nw, st, mb, pf in ((4, 2, 2, "false"), (4, 3, 2, "false"), (4, 1, 3, "true"), (8, 2, 1, "true"),
                           (2, 3, 4, "true"), (4, 3, 2, "true")):
        ks.append(_decode_mma(f"decode-frag d128 int8 {nw}w {st}st {mb}b{' pf' if pf == 'true' else ''}",
                               128, 1, nw, st, mb, "true", pf))
    for wm, rf, bn, dbuf, mb, qreg in ((8, 1, 64, "false", 1, "false"), (8, 1, 32, "true", 1, "false"),
                                       (4, 1, 64, "true", 2, "false"), (4, 2, 32, "true", 1, "false"),
                                       (4, 1, 32, "true", 2, "false"), (8, 1, 64, "false", 1, "true"),
                                       (8, 1, 32, "true", 1, "true"), (4, 1, 32, "true", 2, "true")):
        name = f"prefill-frag d128 fp16 {wm}w {rf}x16 {bn}k{' 2buf' if dbuf == 'true' else ''}"
        ks.append(_prefill_mma(name + (" qreg" if qreg == "true" else ""), 128, 0, wm, rf, bn, dbuf, mb, qreg))
    # SPLIT: 0 K and V staged together, 1 separately, 2 separately in halves
    for wm, bn, mb, split in ((8, 32, 1, 1), (8, 48, 1, 0), (8, 32, 1, 0), (4, 64, 2, 1), (4, 48, 2, 1),
                              (4, 32, 2, 1), (4, 32, 2, 0), (4, 64, 2, 2), (4, 48, 2, 2), (4, 32, 2, 2),
                              (8, 32, 1, 2)):
        name = f"prefill-frag d128 fp16 {wm}w 2x16 {bn}k{f' split{split}' if split else ''}"
        ks.append(_prefill_mma(name, 128, 0, wm, 2, bn, "false", mb, "false", split))
    for d in (64, 128, 256):  # fp16 one-token decode of small batches, CUDA cores only
        for gc in (1, 2, 4, 8):
            for rope in ("false", "true"):
                ks.append(Kernel(f"decode-vec{'+rope' if rope == 'true' else ''} d{d} group<={gc}",
                                 f"&revolta::paged_decode_vec_kernel<{d}, {gc}, {rope}, 128>", False,
                                 f"&revolta::decode_vec_smem_bytes<{d}, {gc}>"))
            # the 256-thread variant (attention_decode.cu: no fused rotary)
            ks.append(Kernel(f"decode-vec wide d{d} group<={gc}",
                             f"&revolta::paged_decode_vec_kernel<{d}, {gc}, false, 256>", False,
                             f"&revolta::decode_vec_smem_bytes<{d}, {gc}, 256>"))
    ks.append(Kernel("wmma layout probe", "&revolta::wmma_layout_probe_kernel<0>", False))
    for vec in ("true", "false"):
        ks.append(Kernel(f"argmax rows {'float4' if vec == 'true' else 'scalar'}",
                         f"&revolta::argmax_rows_kernel<{vec}>", False))
    for t, tn in DTYPES.items():
        ks.append(Kernel(f"rms_norm {tn}", f"&revolta::rms_norm_kernel<{t}>", False))
        ks.append(Kernel(f"fused_add_rms_norm {tn}", f"&revolta::fused_add_rms_norm_kernel<{t}>", False))
        ks.append(Kernel(f"silu_and_mul {tn}", f"&revolta::silu_and_mul_kernel<{t}>", False))
        ks.append(Kernel(f"sigmoid_gate_mul {tn}", f"&revolta::sigmoid_gate_mul_kernel<{t}>", False))
        for cs, csn in ((t, "same"), ("float", "fp32")):
            if cs == t and t == "float" and csn == "fp32":
                continue
            ks.append(Kernel(f"rotary {tn} cos/sin {csn}", f"&revolta::rotary_kernel<{t}, {cs}>", False))
            for kind, kname in ((0, "same"), (1, "int8"), (2, "fp8e4m3"), (3, "fp8e5m2")):
                ks.append(Kernel(f"rotary_and_cache {tn} cos/sin {csn} ->{kname}",
                                 f"&revolta::rotary_and_cache_kernel<{t}, {cs}, {kind}>", False))
        for kind, kname in ((0, "same"), (1, "int8"), (2, "fp8e4m3"), (3, "fp8e5m2")):
            ks.append(
                Kernel(
                    f"reshape_and_cache {tn}->{kname}",
                    f"&revolta::reshape_and_cache_kernel<{t}, {kind}>",
                    False,
                )
            )
    return ks


def _decode_mma(name: str, d: int, kind: int, nw: int, stages: int, minb: int, rows8: str, pf: str) -> Kernel:
    return Kernel(
        name,
        f"&revolta::paged_decode_mma_kernel<{d}, {kind}, {nw}, {stages}, {minb}, {rows8}, {pf}>",
        True,
        f"&revolta::decode_mma_smem_bytes<{d}, {nw}, {rows8}>",
    )


def _prefill_mma(
    name: str, d: int, kind: int, wm: int, rf: int, bn: int, dbuf: str, minb: int, qreg: str, split: int = 0
) -> Kernel:
    args = f"{d}, {kind}, {wm}, {rf}, {bn}, {dbuf}"
    return Kernel(
        name,
        f"&revolta::paged_prefill_mma_kernel<{args}, {minb}, {qreg}, {split}>",
        True,
        f"&revolta::prefill_mma_smem_bytes<{args}>",
    )


# quant_moe_gemm.cuh's tile aliases as the symbols spell them (MoeGemmWide / MoeGemmShort)
MOE_GEMM_TILES = {"Wide": "MoeGemmTile<64, 128, 32>", "Short": "MoeGemmTile<32, 128, 64>"}
GEMM_TILES = ((128, 128, 32, 2, 4), (128, 128, 32, 2, 2), (256, 128, 32, 4, 2), (128, 256, 32, 2, 4),
              (128, 128, 64, 2, 4))  # the variants launch_gemm() dispatches


def gemm_kernels() -> list[Kernel]:
    """Every instantiation quant_gemm.cu and dense_gemv.cu launch."""
    ks = []
    for bits in (4, 8):
        for v, tile in enumerate(GEMM_TILES):
            args = f"{bits}, {', '.join(map(str, tile))}"
            ks.append(Kernel(f"quant gemm int{bits} v{v} {tile[0]}x{tile[1]}x{tile[2]}",
                             f"&revolta::quant_gemm_kernel<{args}>", True, f"&revolta::quant_gemm_smem_bytes<{args}>"))
        for mt in (1, 2, 4, 8):
            for warps in (4, 8):
                for rows in (4, 8):
                    for defer in ("false", "true"):
                        ks.append(Kernel(f"quant gemv int{bits} m<={mt} w{warps} u{rows}{' defer' * (defer == 'true')}",
                                         f"&revolta::quant_gemv_kernel<{bits}, {mt}, {warps}, {rows}, {defer}>", False,
                                         f"&revolta::quant_gemv_max_smem<{bits}, {mt}, {warps}>"))
        for mt in (1, 2, 4, 8):  # the act-order (gathering) variant: 8 warps, deferred scale
            for rows in (4, 8):
                ks.append(Kernel(f"quant gemv int{bits} m<={mt} w8 u{rows} defer act-order",
                                 f"&revolta::quant_gemv_gather_kernel<{bits}, {mt}, {rows}>", False,
                                 f"&revolta::quant_gemv_max_smem<{bits}, {mt}, 8>"))
        for mt in (1, 2, 4, 8):  # int8 activations with dp4a (quant_gemv_dp4a.cuh): 8 warps, deferred scale
            for rows in (4, 8):
                for kernel, tag in (("quant_gemv_dp4a_kernel", ""), ("quant_gemv_gather_dp4a_kernel", " act-order")):
                    ks.append(Kernel(f"quant gemv int{bits} m<={mt} w8 u{rows} int8-x{tag}",
                                     f"&revolta::{kernel}<{bits}, {mt}, {rows}>", False,
                                     f"&revolta::quant_gemv_max_smem<{bits}, {mt}, 8>", dp4a=True))
        for mt in (1, 2):  # the co-resident variant (4 blocks per SM): 8 warps x 4 rows, deferred scale
            ks.append(Kernel(f"quant gemv int{bits} m<={mt} w8 u4 defer minb4",
                             f"&revolta::quant_gemv_co_kernel<{bits}, {mt}, 8, 4>", False,
                             f"&revolta::quant_gemv_max_smem<{bits}, {mt}, 8>"))
    for mt in (1, 2):  # the split-K-free int4 variant (quant_gemv_whole_k.cuh)
        ks.append(Kernel(f"quant gemv whole-K int4 m<={mt}", f"&revolta::quant_gemv_whole_k_kernel<{mt}, 32, false, false, false>", False,
                         f"&revolta::quant_gemv_whole_k_max_smem<{mt}>"))
        ks.append(Kernel(f"quant gemv whole-K int4 m<={mt} 16 columns", f"&revolta::quant_gemv_whole_k_kernel<{mt}, 16, false, false, false>",
                         False, f"&revolta::quant_gemv_whole_k_max_smem<{mt}>"))
        ks.append(Kernel(f"quant gemv whole-K int4 m<={mt} 16 columns rope", f"&revolta::quant_gemv_whole_k_kernel<{mt}, 16, true, false, false>",
                         False, f"&revolta::quant_gemv_whole_k_max_smem<{mt}>"))
        for rope in ("false", "true"):  # int8 activations with dp4a (16 columns)
            ks.append(Kernel(f"quant gemv whole-K int4 m<={mt} 16 columns{' rope' * (rope == 'true')} int8-x",
                             f"&revolta::quant_gemv_whole_k_kernel<{mt}, 16, {rope}, false, true>", False,
                             f"&revolta::quant_gemv_whole_k_max_smem<{mt}>", dp4a=True))
        for cols, rope in ((32, "false"), (16, "false"), (16, "true")):  # the act-order (gathering) instantiations
            ks.append(Kernel(f"quant gemv whole-K int4 m<={mt} {cols} columns{' rope' * (rope == 'true')} act-order",
                             f"&revolta::quant_gemv_whole_k_kernel<{mt}, {cols}, {rope}, true, false>", False,
                             f"&revolta::quant_gemv_whole_k_gather_max_smem<{mt}>"))
    for mt in (1, 2, 4, 8):  # the skinny fp16 GEMV (dense_gemv.cuh), as dense_gemv.cu launches it
        for rows in (4,) if mt >= 8 else (4, 8):
            for warps in (4, 8):
                ks.append(Kernel(f"dense gemv m<={mt} r{rows} w{warps}",
                                 f"&revolta::dense_gemv_kernel<{mt}, {rows}, {warps}>", False, None))
            for warps in (4, 8):  # with the residual add + RMSNorm in front
                ks.append(Kernel(f"dense gemv norm m<={mt} r{rows} w{warps}",
                                 f"&revolta::dense_gemv_norm_kernel<{mt}, {rows}, {warps}>", False, None))
    for bits in (4, 8):  # quantized MoE experts for few tokens (quant_moe.cuh)
        ks.append(Kernel(f"quant moe gemv int{bits}", f"&revolta::quant_moe_gemv_kernel<{bits}>", False,
                         "&revolta::quant_moe_max_smem"))
        for quads in (8, 16, 32):  # one token (quant_moe_gemv_one_token.cuh)
            ks.append(Kernel(f"quant moe gemv one token int{bits} {4 * quads} columns",
                             f"&revolta::quant_moe_gemv_one_token_kernel<{bits}, {quads}>", False,
                             "&revolta::quant_moe_one_token_max_smem"))
        ks.append(Kernel(f"quant moe down + combine int{bits}", f"&revolta::quant_moe_down_combine_kernel<{bits}>",
                         False, "&revolta::quant_moe_combine_max_smem"))
        for tile, spelt in MOE_GEMM_TILES.items():
            for silu in ("false", "true"):  # true: the gate/up call's SiLU-and-mul epilogue
                ks.append(Kernel(f"quant moe gemm {tile.lower()} int{bits}{' silu' if silu == 'true' else ''}",
                                 f"&revolta::quant_moe_gemm_kernel<{bits}, revolta::{spelt}, {silu}>", True,
                                 f"&revolta::quant_moe_gemm_smem_bytes<{bits}, revolta::MoeGemm{tile}>"))
    return ks


def moe_gdn_kernels() -> list[Kernel]:
    """Every instantiation gdn.cu and moe.cu launch (gated delta rule, conv1d, gating, gated norm, MoE decode)."""
    ks: list[Kernel] = []
    for t, tn in DTYPES.items():
        for dk in (64, 128):
            ks.append(Kernel(f"gdn decode dk{dk} {tn}", f"&revolta::gdn_decode_kernel<{t}, {dk}>", False))
            for conv in ("false", "true"):
                ks.append(Kernel(f"gdn fused decode{' +conv' if conv == 'true' else ''} dk{dk} {tn}",
                                 f"&revolta::gdn_decode_fused_kernel<{t}, {dk}, {conv}>", False))
            ks.append(Kernel(f"gdn prefill dk{dk} {tn}", f"&revolta::gdn_prefill_kernel<{t}, {dk}>", False))
        ks.append(Kernel(f"conv1d update {tn}", f"&revolta::conv1d_update_kernel<{t}>", False))
        ks.append(Kernel(f"conv1d prefill {tn}", f"&revolta::conv1d_prefill_kernel<{t}>", False))
        ks.append(Kernel(f"conv1d state {tn}", f"&revolta::conv1d_state_kernel<{t}>", False))
        ks.append(Kernel(f"gdn gating {tn}", f"&revolta::gdn_gating_kernel<{t}>", False))
        ks.append(Kernel(f"rms_norm_gated {tn}", f"&revolta::rms_norm_gated_kernel<{t}>", False))
        for name, kernel in (("up", "moe_up_kernel"), ("route+up", "moe_route_up_kernel"), ("down", "moe_down_kernel"),
                             ("router+norm", "moe_router_norm_kernel")):
            k = Kernel(f"moe {name} {tn}", f"&revolta::{kernel}<{t}>", False)
            k.smem_dynamic = MOE_DYNAMIC_SMEM
            ks.append(k)
        ks.append(Kernel(f"moe router {tn}", f"&revolta::moe_router_kernel<{t}>", False))
        # routing and combination around the quantized experts (moe_routing.cuh)
        ks.append(Kernel(f"moe topk softmax {tn}", f"&revolta::moe_topk_softmax_kernel<{t}>", False))
        ks.append(Kernel(f"moe combine {tn}", f"&revolta::moe_combine_kernel<{t}>", False))
    return ks


@dataclass(frozen=True)
class Unit:
    """The headers of one translation unit of the library and the kernels its launchers instantiate."""

    name: str
    headers: tuple[str, ...]
    kernels: Callable[[], list[Kernel]]

    def source(self) -> str:
        """A translation unit that includes the headers and gives each table kernel's dynamic shared memory
        constant an extern "C" name (``revolta_smem_<i>``), so its value appears in the unit's PTX."""
        lines = [f'#include "{h}"' for h in self.headers]
        for i, k in enumerate(self.kernels()):
            if k.smem_expr:
                lines.append(f'extern "C" __device__ int revolta_smem_{i} = {k.smem_expr.lstrip("&")};')
        return "\n".join(lines) + "\n"


UNITS = (
    Unit("attention", ("attention.cuh", "decode.cuh", "prefill.cuh", "cache.cuh", "decode_mma.cuh", "prefill_mma.cuh",
                       "mma_layout.cuh", "norm.cuh", "decode_vec.cuh", "rotary.cuh", "sampling.cuh"),
         attention_kernels),
    Unit("gemm", ("quant_gemm.cuh", "quant_gemv_whole_k.cuh", "dense_gemv.cuh", "dense_gemv_norm.cuh", "quant_moe.cuh",
                  "quant_moe_gemv_one_token.cuh", "quant_moe_combine.cuh", "quant_moe_gemm.cuh"), gemm_kernels),
    Unit("moe_gdn", ("gdn_decode.cuh", "gdn_decode_fused.cuh", "gdn_prefill.cuh", "conv1d.cuh", "moe.cuh",
                     "moe_routing.cuh"), moe_gdn_kernels),
)
