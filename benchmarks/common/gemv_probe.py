"""The in-kernel probe of the skinny quantized GEMVs: reading its records and describing PDL-chained launches.

A native library built with ``-DREVOLTA_GEMV_PROBE`` has thread 0 of every block record %globaltimer and clock64
at block start, before the PDL wait, after it, x staged, compute done and exit. Chains of M=1 calls are captured
in one CUDA graph (PDL on, weights rotated through copies > 3x L2) and replayed; the records of the last replay
are grouped into launches (a launch's blocks all record before any block of the next one passes its wait) and
each launch is described relative to the previous launch's last block exit ("prev_end"): first block start,
wait return (median / max over blocks), staging, compute and exit phases (median / max), and the launch's own
last exit ("path" = what it adds to the chain).
"""

from __future__ import annotations

import ctypes
import statistics
from collections import defaultdict

import torch

from common.gemv import awq_bytes, awq_weights
from common.timing import capture, replay_us
from revolta_kernels import native, native_quant, ops_quant


def probe_available() -> bool:
    """Whether the loaded native library was built with the probe."""
    return native.LIB is not None and hasattr(native.LIB, "revolta_gemv_probe_read")


class Rec(ctypes.Structure):
    """One block's record: globaltimer (``t``) and clock64 (``c``) at the six points, its SM, block and shape."""

    _fields_ = [("t", ctypes.c_uint64 * 6), ("c", ctypes.c_uint64 * 6), ("smid", ctypes.c_int),
                ("block", ctypes.c_int), ("n", ctypes.c_int), ("k", ctypes.c_int)]


CAP = 1 << 17  # records the probe buffer holds


def read_probe(symbol: str = "revolta_gemv_probe_read") -> list[Rec]:
    """The records one translation unit's probe buffer holds (the skinny GEMVs' by default), emptying it."""
    fn = getattr(native.LIB, symbol)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    buf = (Rec * CAP)()
    cnt = ctypes.c_int(0)
    rc = fn(ctypes.addressof(buf), CAP, ctypes.byref(cnt))
    assert rc == 0, rc
    return list(buf[: min(cnt.value, CAP)])


def grid_of(k: int, n: int, act: int) -> int:
    """Blocks of an M=1 call's launch (column tiles x K splits), for grouping the records into launches."""
    pl = native_quant.plan(1, n, k, 4, 128, torch.device("cuda"))
    assert act != 1 or not pl.get("full"), "act 1 never takes the split-K-free kernel: pick K > 4096"
    return pl["column_tiles"] * pl["splits"]


def summarize(recs: list[Rec], grids: list[int], shapes: list[str], bw_gbs: float, nbytes: list[int]) -> dict:
    """Group the records (in append order) into the launches of one replay, then per shape label stats."""
    total = sum(grids)
    assert len(recs) >= total, (len(recs), total)
    recs = recs[-total:]
    launches = []
    pos = 0
    for g in grids:
        launches.append(recs[pos:pos + g])
        pos += g
    # cycles -> ns from all blocks (clock64 per SM, globaltimer global)
    ratios = [(r.t[5] - r.t[0]) / max(1, r.c[5] - r.c[0]) for r in recs if r.c[5] > r.c[0] and r.t[5] > r.t[0]]
    ns_per_cycle = statistics.median(ratios) if ratios else 0.5
    tvals = sorted({r.t[0] % 4096 for r in recs})
    per: dict = defaultdict(lambda: defaultdict(list))
    prev_end = None
    for blocks, label, nb in zip(launches, shapes, nbytes, strict=True):
        end = max(r.t[5] for r in blocks)
        if prev_end is not None:
            d = per[label]
            d["path_us"].append((end - prev_end) / 1e3)
            d["ideal_us"].append(nb / bw_gbs / 1e3)
            d["first_start_us"].append((min(r.t[0] for r in blocks) - prev_end) / 1e3)
            d["last_start_us"].append((max(r.t[0] for r in blocks) - prev_end) / 1e3)
            w = sorted((r.t[2] - prev_end) / 1e3 for r in blocks)
            d["wait_ret_med_us"].append(statistics.median(w))
            d["wait_ret_min_us"].append(w[0])
            d["wait_ret_max_us"].append(w[-1])
            for name, a, b in (("stage", 2, 3), ("compute", 3, 4), ("exit", 4, 5), ("prewait", 0, 1)):
                v = sorted((r.c[b] - r.c[a]) * ns_per_cycle / 1e3 for r in blocks)
                d[f"{name}_med_us"].append(statistics.median(v))
                d[f"{name}_max_us"].append(v[-1])
            ends = sorted((r.t[5] - prev_end) / 1e3 for r in blocks)
            d["end_med_us"].append(statistics.median(ends))
            d["blocks"].append(len(blocks))
            sm_count = defaultdict(int)
            for r in blocks:
                sm_count[r.smid] += 1
            d["max_blocks_per_sm"].append(max(sm_count.values()))
            d["sms_used"].append(len(sm_count))
        prev_end = end
    out = {"ns_per_cycle": ns_per_cycle, "globaltimer_distinct_low_bits": len(tvals)}
    for label, d in per.items():
        out[label] = {k: round(statistics.mean(v), 3) for k, v in d.items()}
        out[label]["n"] = len(d["path_us"])
    return out


def step_call(st: dict, w: tuple, k: int, act: int, g: torch.Tensor):
    """One chained M=1 AWQ call reading ``st["y"]`` (and ``st["res"]``) and writing them: plain (act 0), with the
    fused SiLU-and-mul (1) or the fused residual add + RMSNorm with norm weight ``g`` (2)."""
    if act == 0:
        def call():
            st["y"] = ops_quant.quant_matmul(st["y"][:, :k], *w, 4, 128, 0)
    elif act == 1:
        def call():
            st["y"] = ops_quant.quant_matmul_silu(st["y"][:, :2 * k], *w, 4, 128, 0)
    else:
        def call():
            st["y"], st["res"] = ops_quant.quant_matmul_add_rms_norm(st["y"][:, :k], st["res"], g, 1e-5, False, *w,
                                                                    4, 128, 0)
    return call


def run_chain(name: str, steps: list[tuple], copies: int, bw_gbs: float) -> dict:
    """steps: (label, K, N, act) in chain order; each step's output feeds the next step's input."""
    ws = [[awq_weights(k, n) for (_, k, n, _) in steps] for _ in range(copies)]
    norm_w = [(torch.randn(k, device="cuda") * 0.1 + 1).half() for (_, k, _, _) in steps]
    st = {"y": torch.randn(1, steps[0][1], device="cuda").half(), "res": torch.randn(1, 4096, device="cuda").half()}
    calls, grids, labels, nbytes = [], [], [], []
    for c in range(copies):
        for j, (label, k, n, act) in enumerate(steps):
            calls.append(step_call(st, ws[c][j], k, act, norm_w[j]))
            grids.append(grid_of(k, n, act))
            labels.append(label)
            nbytes.append(awq_bytes(k, n))
    g = capture(calls, st)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    read_probe()  # drop the warm-up records
    g.replay()
    torch.cuda.synchronize()
    recs = read_probe()
    res = summarize(recs, grids, labels, bw_gbs, nbytes)
    res["graph_us_per_call"] = replay_us(g) / len(calls)  # plain timing of the same graph
    res["graph_ideal_us_per_call"] = sum(nbytes) / len(nbytes) / bw_gbs / 1e3
    del g
    print(f"== {name}: {res['graph_us_per_call']:.2f} us/call (ideal {res['graph_ideal_us_per_call']:.2f})", flush=True)
    for label, d in res.items():
        if isinstance(d, dict):
            print(f"  {label:10s} path {d['path_us']:6.2f} (ideal {d['ideal_us']:5.2f}) | first start {d['first_start_us']:6.2f}"
                  f" last start {d['last_start_us']:6.2f} | wait ret min/med/max {d['wait_ret_min_us']:5.2f}"
                  f" {d['wait_ret_med_us']:5.2f} {d['wait_ret_max_us']:5.2f} | stage {d['stage_med_us']:5.2f}/"
                  f"{d['stage_max_us']:5.2f} compute {d['compute_med_us']:5.2f}/{d['compute_max_us']:5.2f} exit "
                  f"{d['exit_med_us']:5.2f}/{d['exit_max_us']:5.2f} | end med {d['end_med_us']:5.2f} | blocks "
                  f"{d['blocks']:.0f} max/SM {d['max_blocks_per_sm']:.0f} SMs {d['sms_used']:.0f}", flush=True)
    return res


# The probe of a whole decode step: the light decode attention records into a second buffer
# (``revolta_attn_probe_read``) with the same six points, so a captured step's GEMVs and attention line up.
def read_step_probe() -> list[Rec]:
    """The records of the GEMV and attention probe buffers together, emptying both."""
    return read_probe() + read_probe("revolta_attn_probe_read")


def launches(recs: list[Rec]) -> list[list[Rec]]:
    """Consecutive records (by exit time) of one kernel shape form one launch (split-K blocks exit several us
    apart; two launches of one shape are a whole layer apart)."""
    out: list[list[Rec]] = []
    for r in sorted(recs, key=lambda r: r.t[5]):
        if out and (out[-1][0].n, out[-1][0].k) == (r.n, r.k) and r.t[5] - out[-1][-1].t[5] < 10000:
            out[-1].append(r)
        else:
            out.append([r])
    return out


def label(r: Rec) -> str:
    """A record's kernel: the light decode attention (negative n: head size, k: splits) or a GEMV shape."""
    return f"attention d{-r.n} splits {r.k}" if r.n < 0 else f"gemv K={r.k} N={r.n}"


def describe(groups: list[list[Rec]]) -> dict:
    """Per kernel label: the mean over its launches of the hand-off, post-wait span, path and phase medians."""
    ratios = [(r.t[5] - r.t[0]) / (r.c[5] - r.c[0]) for g in groups for r in g if r.c[5] > r.c[0] and r.t[5] > r.t[0]]
    ns_per_cycle = statistics.median(ratios)
    per: dict = defaultdict(lambda: defaultdict(list))
    prev_end = None
    for g in sorted(groups, key=lambda g: max(r.t[5] for r in g)):
        end = max(r.t[5] for r in g)
        if prev_end is not None:
            d = per[label(g[0])]
            first_wait = min(r.t[2] for r in g)
            d["first_start_us"].append((min(r.t[0] for r in g) - prev_end) / 1e3)
            d["release_us"].append((first_wait - prev_end) / 1e3)
            d["post_wait_us"].append((end - first_wait) / 1e3)
            d["path_us"].append((end - prev_end) / 1e3)
            d["wait_spread_us"].append((statistics.median(r.t[2] for r in g) - first_wait) / 1e3)
            for name, a, b in (("staged", 2, 3), ("main_loop", 3, 4), ("exit", 4, 5)):
                v = sorted((r.c[b] - r.c[a]) * ns_per_cycle / 1e3 for r in g)
                d[f"{name}_med_us"].append(statistics.median(v))
                d[f"{name}_max_us"].append(v[-1])
            d["blocks"].append(len(g))
        prev_end = end
    return {k: {m: round(statistics.mean(v), 3) for m, v in d.items()} | {"launches": len(d["path_us"])}
            for k, d in per.items()}


# The chains the probe describes: (label, K, N, act) in chain order; act 0 plain, 1 fused SiLU, 2 fused norm.
PROBE_CHAINS = {
    "4096x4096": [("o4096", 4096, 4096, 0), ("o4096b", 4096, 4096, 0)],
    "4096x14336": [("up14336", 4096, 14336, 0), ("dn14336", 14336, 4096, 0)],
    "llama_layer": [("qkv_norm", 4096, 6144, 2), ("o", 4096, 4096, 0), ("gate_up_norm", 4096, 28672, 2),
                    ("down_silu", 14336, 4096, 1)],
}


def probe_chains(bw_gbs: float) -> dict:
    """Every chain of :data:`PROBE_CHAINS`, weights rotated through copies > 3x the L2; a chain that fails is
    recorded as an error and the others still run."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    result: dict = {}
    for name, steps in PROBE_CHAINS.items():
        per = sum(awq_bytes(k, n) for (_, k, n, _) in steps)
        try:
            result[name] = run_chain(name, steps, max(4, -(-3 * l2 // per)), bw_gbs)
        except Exception as e:  # noqa: BLE001 - keep the other chains
            print(f"{name} failed: {e!r}", flush=True)
            result[name] = {"error": repr(e)}
        torch.cuda.empty_cache()
    return result
