"""The headline benchmarks and what becomes of their results: one merged JSON, a short summary, a baseline file.

``scripts/gpu_verify.sh`` asks this module which headline benchmarks to run (``names``, ``argv NAME``), runs each
once per library and round into ``DIR/NAME.LIB.ROUND.json`` (LIB ``a`` = the library under test, ``b`` = the
``--compare-lib`` one), writes each GPU test suite's log and exit status to ``DIR/SUITE.log`` / ``DIR/SUITE.rc``,
then calls ``collect``, which writes ``results.json`` (every figure, the medians over rounds, and b / a ratios),
``summary.txt``, and with ``--baseline KIND`` the baseline file ``baselines/KIND.json``.

Standard library only, so it runs as ``python3 benchmarks/common/results.py ...`` on any machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import subprocess
from pathlib import Path

# name -> (the benchmark's command line from the repository root, the figures kept from its JSON)
HEADLINES: dict[str, tuple[list[str], list[str]]] = {
    "llama8b_fp16": (["benchmarks/gpu_e2e.py", "--config", "benchmarks/configs/llama-3.1-8b"],
                     ["batch1_decode_tok_s", "batch1_fraction_of_roofline", "concurrent64_output_tok_s",
                      "prefill8192_tok_s"]),
    "llama8b_awq": (["benchmarks/gpu_e2e.py", "--config", "benchmarks/configs/llama-3.1-8b-awq", "--decode-only",
                     "--concurrency", "1", "--prefill-len", "1024"],
                    ["batch1_decode_tok_s", "batch1_fraction_of_roofline"]),
    "qwen35_35b_a3b_awq": (["benchmarks/hybrid_e2e.py", "--config", "benchmarks/configs/qwen3.5-35b-a3b-awq"],
                           ["batch1_decode_tok_s", "batch1_fraction_of_roofline", "ttft_ms"]),
}
LIBS = {"a": "lib", "b": "compare_lib"}


def gpu_kind(name: str) -> str:
    """A short, file-name-safe kind of a GPU name: "NVIDIA H100 80GB HBM3" -> "h100"."""
    m = re.search(r"\b([A-Z]\d{2,4}[A-Z]?)\b", name)
    return (m.group(1) if m else re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")).lower()


def read_json(path: Path) -> dict:
    """A result file's object; one that is missing or does not parse (a benchmark that died) is an error entry."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"error": f"{path.name}: {exc}"}


def test_suites(directory: Path) -> dict[str, dict]:
    """Per GPU test suite: its exit status and pytest's last summary line."""
    suites = {}
    for rc_file in sorted(directory.glob("*.rc")):
        log = rc_file.with_suffix(".log")
        lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
        summary = next((line for line in reversed(lines) if re.search(r"\b(passed|failed|error|no tests)", line)), "")
        failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))][:20]
        suites[rc_file.stem] = {"rc": int(rc_file.read_text().strip() or -1), "summary": summary.strip("= "),
                                "failures": failed}
    return suites


def headline_results(directory: Path) -> dict[str, dict]:
    """Per headline benchmark: the raw runs by library, and per figure the median over rounds of each library and
    the ratio compare_lib / lib."""
    out: dict[str, dict] = {}
    for name, (argv, figures) in HEADLINES.items():
        runs: dict[str, list[dict]] = {}
        for tag, lib in LIBS.items():
            files = sorted(directory.glob(f"{name}.{tag}.*.json"))
            if files:
                runs[lib] = [read_json(f) for f in files]
        if not runs:
            continue
        entry: dict = {"command": "python " + " ".join(argv), "figures": {}, "runs": runs}
        for fig in figures:
            row: dict = {}
            for lib, results in runs.items():
                values = [r[fig] for r in results if isinstance(r.get(fig), (int, float))]
                row[lib] = statistics.median(values) if values else None
            if row.get("lib") and row.get("compare_lib"):
                row["ratio"] = row["compare_lib"] / row["lib"]
            entry["figures"][fig] = row
        out[name] = entry
    return out


def git_commit(root: Path) -> str | None:
    """The repository's HEAD commit, when ``root`` is a git checkout."""
    try:
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def baseline(results: dict) -> dict:
    """The baseline file of a run: per headline benchmark its command and the library-under-test figures."""
    return {"gpu": results["gpu"], "gpu_kind": results["gpu_kind"], "commit": results["commit"],
            "date": results["date"], "copy_bandwidth_GBps": results.get("copy_bandwidth_GBps"),
            "benchmarks": {name: {"command": h["command"],
                                  **{fig: row.get("lib") for fig, row in h["figures"].items()}}
                           for name, h in results["headline"].items()}}


def summary_lines(results: dict, reference: dict | None) -> list[str]:
    """The run in a few lines: GPU, tests, headline figures (with ratios to the compare library and to the
    committed baseline of this GPU kind, when there are)."""
    lines = [f"{results['gpu']} ({results['gpu_kind']}), commit {results['commit']}, {results['date']}"]
    for suite, t in results["tests"].items():
        lines.append(f"tests {suite}: rc={t['rc']} {t['summary']}")
        lines += [f"  {f}" for f in t["failures"][:10]]
    for name, h in results["headline"].items():
        for fig, row in h["figures"].items():
            text = f"{name} {fig}: " + " ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
            ref = ((reference or {}).get("benchmarks", {}).get(name, {})).get(fig)
            if isinstance(ref, (int, float)) and isinstance(row.get("lib"), (int, float)) and ref:
                text += f" (baseline {ref:.4g}, x{row['lib'] / ref:.3f})"
            lines.append(text)
        errors = [r["error"] for rs in h["runs"].values() for r in rs if "error" in r]
        lines += [f"{name} error: {e}" for e in errors]
    return lines


def collect(args: argparse.Namespace) -> None:
    """Write results.json and summary.txt (and a baseline file) under ``args.out`` from ``args.dir``."""
    directory, out = Path(args.dir), Path(args.out)
    head = headline_results(directory)
    first = next((r for h in head.values() for rs in h["runs"].values() for r in rs if "gpu" in r), {})
    gpu = args.gpu or first.get("gpu", "unknown GPU")
    results = {"gpu": gpu, "gpu_kind": args.baseline or gpu_kind(gpu),
               "commit": args.commit or git_commit(Path(args.root)), "date": datetime.date.today().isoformat(),
               "copy_bandwidth_GBps": first.get("copy_bandwidth_GBps"), "libraries": dict(
                   pair.split("=", 1) for pair in args.lib), "tests": test_suites(directory), "headline": head}
    ref_path = Path(args.root) / "benchmarks" / "baselines" / f"{results['gpu_kind']}.json"
    reference = read_json(ref_path) if ref_path.is_file() else None
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    lines = summary_lines(results, reference)
    if args.baseline:
        base_dir = out / "baselines"
        base_dir.mkdir(exist_ok=True)
        (base_dir / f"{args.baseline}.json").write_text(json.dumps(baseline(results), indent=2) + "\n")
        lines.append(f"baseline written: baselines/{args.baseline}.json")
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("names", help="the headline benchmarks' names, one a line")
    a = sub.add_parser("argv", help="a headline benchmark's command line (script and arguments)")
    a.add_argument("name", choices=sorted(HEADLINES))
    c = sub.add_parser("collect", help="merge a run's files into results.json and summary.txt")
    c.add_argument("--dir", required=True, help="where the run's NAME.LIB.ROUND.json and SUITE.log/.rc files are")
    c.add_argument("--out", required=True, help="where results.json, summary.txt (and baselines/) go")
    c.add_argument("--root", default=".", help="the repository root (for the commit and the committed baselines)")
    c.add_argument("--lib", action="append", default=[], metavar="NAME=PATH", help="a library the run used")
    c.add_argument("--gpu", default="", help="the GPU's name (default: from the benchmarks' results)")
    c.add_argument("--commit", default="", help="the commit measured (default: the checkout's HEAD)")
    c.add_argument("--baseline", default="", metavar="KIND", help="also write baselines/KIND.json")
    args = ap.parse_args()
    if args.command == "names":
        print("\n".join(HEADLINES))
    elif args.command == "argv":
        print(" ".join(HEADLINES[args.name][0]))
    else:
        collect(args)


if __name__ == "__main__":
    main()
