"""Teacher-forced logits of the Volta library (Volta mode) against the modern library, on dummy-weight models.

For each model config, one process per library runs the same seeded dummy weights and the same random prompt,
then 64 decode steps whose input tokens are forced (a seeded random sequence, not the sampled ones), recording
the float32 logits of every step; this process compares them. The Volta run sets ``REVOLTA_EMULATE_ARCH=70``
(the Volta library, a V100's host choices); the modern run uses the GPU's own choices. Reports per model the
largest and median relative L2 error over the steps (||volta - modern|| / ||modern||) against the kernel tests'
fp16 bound, and whether the greedy tokens agree.

Usage (on a GPU machine):
    python benchmarks/volta_parity.py --volta-lib V.so --modern-lib M.so \
        --config benchmarks/configs/llama-3.1-8b --config benchmarks/configs/llama-3.1-8b-awq \
        --config benchmarks/configs/qwen3.5-35b-a3b-awq --out $OUT/volta_parity.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "packages" / "revolta-kernels" / "tests"))
from moe_cases import TOL  # noqa: E402  (the kernel tests' relative L2 bound per storage type)

FP16_TOL = TOL[torch.float16]


def record(config: str, steps: int, prompt_len: int, out: Path) -> None:
    """Run ``config`` with dummy weights, force ``steps`` tokens after a random prompt and save every step's
    logits (float32, CPU) and the argmax tokens to ``out``."""
    import revolta_kernels
    from revolta_engine import LLM, SamplingParams

    llm = LLM(config, load_format="dummy", dtype="float16", max_model_len=prompt_len + steps + 64, max_num_seqs=1)
    engine = llm.llm_engine
    vocab = int(engine.hf_config.vocab_size)
    gen = torch.Generator().manual_seed(1234)
    prompt = torch.randint(0, vocab, (prompt_len,), generator=gen).tolist()
    forced = torch.randint(0, vocab, (steps,), generator=gen)
    logits_seen: list[torch.Tensor] = []
    sample = engine.sampler.sample

    def forced_sample(logits: torch.Tensor, rows: list) -> torch.Tensor:
        sample(logits, rows)  # the sampler's own work (and any state it keeps), result replaced
        logits_seen.append(logits[0].float().cpu())
        step = min(len(logits_seen) - 1, steps - 1)
        return forced[step:step + 1].to(logits.device)

    engine.sampler.sample = forced_sample
    t0 = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": prompt}],
                        SamplingParams(temperature=0.0, max_tokens=steps, ignore_eos=True), use_tqdm=False)
    seconds = time.perf_counter() - t0
    fed = list(outs[0].outputs[0].token_ids)
    assert fed == forced.tolist(), f"the engine did not take the forced tokens: {fed[:8]} vs {forced[:8].tolist()}"
    stacked = torch.stack(logits_seen[:steps])
    torch.save({"logits": stacked, "status": revolta_kernels.native_status(), "seconds": seconds}, out)


def compare(volta: dict, modern: dict) -> dict:
    """Per-step relative L2 error of the Volta logits against the modern ones, and top-1 agreement."""
    a, b = volta["logits"].double(), modern["logits"].double()
    finite = bool(torch.isfinite(a).all() and torch.isfinite(b).all())
    rel = ((a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-30)).tolist() if finite else [float("inf")]
    agree = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
    return {"steps": int(a.shape[0]), "max_rel_l2": max(rel), "median_rel_l2": float(torch.tensor(rel).median()),
            "fp16_tol": FP16_TOL, "within_tol": max(rel) <= FP16_TOL, "top1_agreement": agree,
            "volta_seconds": volta["seconds"], "modern_seconds": modern["seconds"],
            "volta_status": volta["status"], "modern_status": modern["status"]}


def run_one(config: str, lib: str, volta: bool, args: argparse.Namespace, out: Path) -> None:
    """:func:`record` in a fresh process with ``lib`` loaded (Volta mode when ``volta``)."""
    env = dict(os.environ, REVOLTA_NATIVE_LIB=lib)
    env.pop("REVOLTA_EMULATE_ARCH", None)
    if volta:
        env["REVOLTA_EMULATE_ARCH"] = "70"
    cmd = [sys.executable, __file__, "record", "--config", config, "--steps", str(args.steps),
           "--prompt-len", str(args.prompt_len), "--record-to", str(out)]
    subprocess.run(cmd, env=env, check=True, timeout=args.timeout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", choices=("compare", "record"), default="compare")
    ap.add_argument("--config", action="append", help="a model config directory (repeatable)")
    ap.add_argument("--volta-lib", help="librevolta_native_sm70.so (loaded in Volta mode)")
    ap.add_argument("--modern-lib", help="librevolta_native.so (the GPU's own choices)")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--timeout", type=int, default=600, help="seconds for each model run")
    ap.add_argument("--record-to", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=Path("bench_out/volta_parity.json"))
    args = ap.parse_args()
    if args.mode == "record":
        record(args.config[0], args.steps, args.prompt_len, args.record_to)
        return
    if not (args.config and args.volta_lib and args.modern_lib):
        ap.error("compare needs --config, --volta-lib and --modern-lib")
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for config in args.config:
            name = Path(config).name
            try:
                files = {}
                for tag, lib, volta in (("volta", args.volta_lib, True), ("modern", args.modern_lib, False)):
                    files[tag] = Path(tmp) / f"{name}.{tag}.pt"
                    run_one(config, lib, volta, args, files[tag])
                results[name] = compare(torch.load(files["volta"]), torch.load(files["modern"]))
            except (subprocess.SubprocessError, OSError) as exc:
                results[name] = {"error": str(exc)}
    print(f"{'model':28s} {'steps':>5s} {'max rel L2':>11s} {'median':>9s} {'tol':>7s} {'top-1 agree':>11s}")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:28s} error: {r['error']}")
            continue
        print(f"{name:28s} {r['steps']:5d} {r['max_rel_l2']:11.2e} {r['median_rel_l2']:9.2e} {r['fp16_tol']:7.0e} "
              f"{r['top1_agreement']:11.3f}  {'within' if r['within_tol'] else 'OUTSIDE'} the fp16 bound")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    sys.exit(0 if results and all(r.get("within_tol") for r in results.values()) else 1)


if __name__ == "__main__":
    main()
