"""``revolta generate "prompt"`` (one shot) and ``revolta chat`` (interactive), streaming to the terminal."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from revolta_cli.engine_flags import add_engine_flags, engine_args_from


def _add_common(p: argparse.ArgumentParser) -> None:
    add_engine_flags(p)
    p.add_argument("--url", default=None, help="use this OpenAI-compatible server instead of a local engine")
    p.add_argument("--api-key", default=None, help="API key for --url")
    p.add_argument("--max-tokens", type=int, default=256, help="most tokens to generate per answer")
    p.add_argument("--temperature", type=float, default=None,
                   help="default: the model's generation config, else 0.7 (with --url: the server's default)")
    p.add_argument("--top-p", type=float, default=None,
                   help="default: the model's generation config, else 1.0 (with --url: the server's default)")


def add_parsers(subparsers: Any) -> None:
    """Register ``generate`` and ``chat``."""
    g = subparsers.add_parser("generate", help="generate a completion for one prompt")
    g.add_argument("prompt", help="the prompt text")
    g.add_argument("--chat", action="store_true", help="send the prompt as a user chat message")
    _add_common(g)
    g.set_defaults(func=run_generate)
    c = subparsers.add_parser("chat", help="interactive chat in the terminal")
    c.add_argument("--system", default=None, help="system prompt")
    _add_common(c)
    c.set_defaults(func=run_chat)


def _generator(ns: argparse.Namespace) -> Any:
    from revolta_cli.local_engine import LocalGenerator, RemoteGenerator

    if ns.url:
        name = ns.served_model_name[0] if ns.served_model_name else None
        return RemoteGenerator(ns.url, name, ns.api_key)
    return LocalGenerator(engine_args_from(ns))


def _options(ns: argparse.Namespace) -> dict:
    """The sampling values the user gave (the model's or server's defaults fill the rest)."""
    given = {"max_tokens": ns.max_tokens, "temperature": ns.temperature, "top_p": ns.top_p}
    return {k: v for k, v in given.items() if v is not None}


def run_generate(ns: argparse.Namespace) -> int:
    """Print the completion of ``ns.prompt`` as it is generated."""
    gen = _generator(ns)
    messages = [{"role": "user", "content": ns.prompt}] if ns.chat else None
    for text in gen.stream(None if ns.chat else ns.prompt, messages, _options(ns)):
        sys.stdout.write(text)
        sys.stdout.flush()
    sys.stdout.write("\n")
    return 0


def run_chat(ns: argparse.Namespace) -> int:
    """Read a line, stream the answer, keep the conversation; /reset clears it, /exit or Ctrl-D leaves."""
    gen = _generator(ns)
    history: list[dict] = [{"role": "system", "content": ns.system}] if ns.system else []
    print("Chat with the model. /reset starts over, /exit (or Ctrl-D) leaves.")
    while True:
        try:
            line = input("> ")
        except (EOFError, KeyboardInterrupt):
            print()
            return 0
        if line.strip() in ("/exit", "/quit"):
            return 0
        if line.strip() == "/reset":
            history = history[:1] if ns.system else []
            continue
        if not line.strip():
            continue
        history.append({"role": "user", "content": line})
        answer = []
        try:
            for text in gen.stream(None, history, _options(ns)):
                answer.append(text)
                sys.stdout.write(text)
                sys.stdout.flush()
        except KeyboardInterrupt:
            sys.stdout.write(" [interrupted]")
        print()
        history.append({"role": "assistant", "content": "".join(answer)})
