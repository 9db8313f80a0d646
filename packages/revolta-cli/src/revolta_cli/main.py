"""Entry point of the `revolta` command."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    """The full command line: serve, chat, generate, doctor, bench {latency, serve, throughput}."""
    from revolta_cli import doctor, generate, serve
    from revolta_cli.bench import latency as bench_latency
    from revolta_cli.bench import serve as bench_serve
    from revolta_cli.bench import throughput as bench_throughput

    parser = argparse.ArgumentParser(prog="revolta", description="ReVolta: LLM inference and serving, Volta first.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve.add_parser(sub)
    generate.add_parsers(sub)
    doctor.add_parser(sub)
    bench = sub.add_parser("bench", help="benchmarks: latency (one batch, offline), serve (a running server), "
                                         "throughput (offline)")
    bench_sub = bench.add_subparsers(dest="bench_command", metavar="BENCH")
    bench_latency.add_parser(bench_sub)
    bench_serve.add_parser(bench_sub)
    bench_throughput.add_parser(bench_sub)
    bench.set_defaults(func=lambda ns: _help(bench))
    return parser


def _help(parser: argparse.ArgumentParser) -> int:
    """Print ``parser``'s help; exit code 2 (a command is missing)."""
    parser.print_help()
    return 2


def main(argv: list[str] | None = None) -> int:
    """Run the revolta command line."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    if not hasattr(ns, "func"):
        parser.print_help()
        return 2
    try:
        return int(ns.func(ns) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from revolta_engine.errors import RevoltaError

        if isinstance(exc, RevoltaError):
            print(f"revolta: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
