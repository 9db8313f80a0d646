"""``revolta serve``: the OpenAI-compatible server, with the engine core in its own process."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys
from typing import Any

from revolta_cli.engine_flags import (
    add_engine_flags,
    api_model_names,
    chat_template_text,
    engine_args_from,
    json_list,
    json_object,
)

logger = logging.getLogger("revolta.serve")


def add_parser(subparsers: Any) -> None:
    """Register ``serve``."""
    p = subparsers.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API",
                              description="Serve a model over an OpenAI-compatible HTTP API (flags follow vllm serve).")
    add_engine_flags(p)
    h = p.add_argument_group("server")
    h.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 for every interface)")
    h.add_argument("--port", type=int, default=8000, help="port to listen on (0: any free port)")
    h.add_argument("--api-key", default=None, help="require `Authorization: Bearer <key>` on the API paths")
    h.add_argument("--ssl-keyfile", default=None, help="serve HTTPS with this private key file (PEM)")
    h.add_argument("--ssl-certfile", default=None, help="... and this certificate file (PEM)")
    h.add_argument("--uvicorn-log-level", default="info", choices=["debug", "info", "warning", "error"])
    h.add_argument("--disable-uvicorn-access-log", action="store_true", help="do not log every request")
    h.add_argument("--disable-log-requests", action="store_true",
                   help="accepted for vLLM command lines: request contents are never logged here")
    h.add_argument("--disable-log-stats", action="store_true",
                   help="do not log throughput and load every REVOLTA_LOG_STATS_INTERVAL seconds (default 10) "
                        "while the engine is busy")
    h.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=None,
                   help="accepted for vLLM command lines: prefill is always chunked (--max-num-batched-tokens per "
                        "step); --no-enable-chunked-prefill is refused")
    h.add_argument("--allowed-origins", type=json_list, default=["*"], metavar="JSON",
                   help='web origins whose pages may call the API from a browser (CORS), e.g. \'["https://a.b"]\' '
                        '(default: any)')
    h.add_argument("--allow-credentials", action="store_true", help="let those pages send cookies or HTTP auth")
    h.add_argument("--allowed-methods", type=json_list, default=["*"], metavar="JSON", help="CORS methods")
    h.add_argument("--allowed-headers", type=json_list, default=["*"], metavar="JSON", help="CORS headers")
    h.add_argument("--enable-force-include-usage", action="store_true",
                   help="end every stream with a usage chunk, as if the request's stream_options asked for it")
    h.add_argument("--return-tokens-as-token-ids", action="store_true",
                   help='logprob tokens as "token_id:N" (for tokens that are not whole UTF-8) unless a request says')
    v = p.add_argument_group("accepted from vLLM command lines, with no effect here (a warning says why)")
    v.add_argument("--attention-backend", default=None, metavar="NAME",
                   help="ReVolta always runs its own paged attention kernels (the reference ops on a CPU)")
    v.add_argument("--disable-custom-all-reduce", action="store_true",
                   help="tensor parallelism here uses NCCL's all-reduce only")
    v.add_argument("--swap-space", type=float, default=None, metavar="GIB",
                   help="preempted requests are recomputed, never swapped; --kv-offloading-size keeps KV blocks in "
                        "CPU memory instead")
    t = p.add_argument_group("tool calling and reasoning")
    t.add_argument("--enable-auto-tool-choice", action="store_true",
                   help="let the model call the request's tools by itself (needs --tool-call-parser)")
    t.add_argument("--tool-call-parser", default=None,
                   help="how the model writes tool calls: hermes, qwen3_coder, llama3_json")
    t.add_argument("--reasoning-parser", default=None,
                   help="split the model's thinking from its answer: qwen3, deepseek_r1")
    t.add_argument("--default-chat-template-kwargs", type=json_object, default=None, metavar="JSON",
                   help='chat template variables for requests that do not set them in chat_template_kwargs, e.g. '
                        '\'{"enable_thinking": false}\' to make a Qwen3 server answer without thinking by default')
    t.add_argument("--trust-request-chat-template", action="store_true",
                   help="run a chat template sent in a request's chat_template field (refused with a 400 otherwise: "
                        "a template is code the server runs)")
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    """Run the server until SIGINT/SIGTERM; returns the exit code."""
    if ns.enable_chunked_prefill is False:
        print("revolta serve: prefill is always chunked here; drop --no-enable-chunked-prefill (a long prompt "
              "runs in steps of --max-num-batched-tokens)", file=sys.stderr)
        return 2
    ns.log_stats_interval = None if ns.disable_log_stats else log_stats_interval()  # a bad value stops us now
    problem = ssl_problem(ns.ssl_keyfile, ns.ssl_certfile)
    if problem:
        print(f"revolta serve: {problem}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for note in ignored_vllm_flags(ns):
        logger.warning("%s", note)
    try:
        return asyncio.run(_serve(ns))
    except asyncio.CancelledError:
        return 0


def ignored_vllm_flags(ns: argparse.Namespace) -> list[str]:
    """A warning for each vLLM flag given that changes nothing here, saying why."""
    notes = []
    if ns.attention_backend is not None:
        notes.append(f"--attention-backend {ns.attention_backend} has no effect: ReVolta always runs its own paged "
                     "attention kernels (Volta-first CUDA, or the reference ops on a CPU)")
    if ns.disable_custom_all_reduce:
        notes.append("--disable-custom-all-reduce has no effect: tensor parallelism here uses NCCL's all-reduce only")
    if ns.swap_space is not None:
        notes.append("--swap-space has no effect: preempted requests are recomputed; --kv-offloading-size GIB keeps "
                     "KV blocks in CPU memory to copy back instead")
    return notes


def ssl_problem(keyfile: str | None, certfile: str | None) -> str | None:
    """Why the HTTPS files cannot be used (both are needed and must be readable), or None."""
    if keyfile is None and certfile is None:
        return None
    if keyfile is None or certfile is None:
        return "HTTPS needs both --ssl-keyfile and --ssl-certfile"
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as exc:
        return f"cannot use --ssl-certfile {certfile} with --ssl-keyfile {keyfile}: {exc}"
    return None


def log_stats_interval() -> float:
    """Seconds between stats log lines: ``REVOLTA_LOG_STATS_INTERVAL`` (or vLLM's ``VLLM_LOG_STATS_INTERVAL``)."""
    from revolta_engine import envs

    var = envs.LOG_STATS_INTERVAL
    name, text = var.lookup() or (var.name, "")
    try:
        seconds = var.get()
    except ValueError:
        raise SystemExit(f"revolta serve: {name}={text!r} is not a number of seconds") from None
    if seconds <= 0:
        raise SystemExit(f"revolta serve: {name} must be more than 0 seconds, not {text}")
    return seconds


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(False)
    return sock


def print_startup(info: Any, names: list[str], url: str, api_key: bool) -> None:
    """The resolved configuration with each value's source, the KV capacity and where to connect."""
    width = max((len(name) for name, _, _ in info.config_report), default=10)
    print("ReVolta configuration (value, source):", flush=False)
    for name, value, source in info.config_report:
        print(f"  {name:<{width}}  {value}  ({source})")
    print(f"KV cache capacity: {info.kv_capacity_tokens} tokens; context length {info.max_model_len} tokens")
    print(f"Model name(s) for requests: {', '.join(names)}")
    print(f"Serving the OpenAI-compatible API at {url}/v1 (health: {url}/health, metrics: {url}/metrics)"
          + (" - API key required" if api_key else ""), flush=True)


async def _serve(ns: argparse.Namespace) -> int:
    import uvicorn

    from revolta_api import build_app
    from revolta_api.clients.mp import MPEngineClient
    from revolta_api.cors import CorsSettings
    from revolta_api.state import ServingOptions
    from revolta_engine.errors import RevoltaError

    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    serving = False

    def on_signal(signum: int, frame: Any) -> None:
        # While uvicorn serves it owns the signals; before that a signal just stops the startup.
        if not serving and main_task is not None:
            loop.call_soon_threadsafe(main_task.cancel)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    from revolta_api.chat_parsing import ChatParsing

    if ns.enable_auto_tool_choice and not ns.tool_call_parser:
        print("revolta serve: --enable-auto-tool-choice needs --tool-call-parser", file=sys.stderr)
        return 2
    try:
        parsing = ChatParsing(tool_call_parser=ns.tool_call_parser,
                              enable_auto_tool_choice=ns.enable_auto_tool_choice,
                              reasoning_parser=ns.reasoning_parser)
    except ValueError as exc:
        print(f"revolta serve: {exc}", file=sys.stderr)
        return 2
    try:
        sock = _bind(ns.host, ns.port)
    except OSError as exc:
        print(f"revolta serve: cannot listen on {ns.host}:{ns.port}: {exc.strerror}", file=sys.stderr)
        return 2
    client = MPEngineClient(engine_args_from(ns))
    try:
        try:
            await client.start()
        except RevoltaError as exc:
            print(f"revolta serve: {exc}", file=sys.stderr)
            return 1
        names = api_model_names(ns, client.info.served_model_name)
        cors = CorsSettings(tuple(ns.allowed_origins), ns.allow_credentials, tuple(ns.allowed_methods),
                            tuple(ns.allowed_headers))
        app = build_app(client, served_model_name=names, api_key=ns.api_key,
                        chat_template=chat_template_text(ns.chat_template), parsing=parsing, cors=cors,
                        options=ServingOptions(dict(ns.default_chat_template_kwargs or {}), ns.enable_force_include_usage,
                                               ns.return_tokens_as_token_ids, ns.trust_request_chat_template),
                        log_stats_interval=ns.log_stats_interval)
        host, port = sock.getsockname()[:2]
        shown_host = f"[{host}]" if ":" in host else host
        url = f"{'https' if ns.ssl_certfile else 'http'}://{shown_host}:{port}"
        print_startup(client.info, names, url, bool(ns.api_key))
        config = uvicorn.Config(app, log_level=ns.uvicorn_log_level, access_log=not ns.disable_uvicorn_access_log,
                                timeout_graceful_shutdown=5, timeout_keep_alive=30,
                                ssl_keyfile=ns.ssl_keyfile, ssl_certfile=ns.ssl_certfile)
        server = uvicorn.Server(config)
        serving = True
        await server.serve(sockets=[sock])
        return 0
    finally:
        serving = False
        client.close()
        sock.close()
        print("revolta serve: stopped", flush=True)
