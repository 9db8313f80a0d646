"""Engine flags shared by ``serve``, ``chat``, ``generate`` and the offline benches (``vllm serve`` names)."""

from __future__ import annotations

import argparse
from typing import Any

# flag dest -> EngineArgs field (same names); flags left unset are not passed, so the engine reports them as
# "default"/"profile" rather than "user".
ENGINE_FLAGS = ("tokenizer", "served_model_name", "dtype", "max_model_len", "block_size", "enable_prefix_caching",
                "max_num_seqs", "max_num_batched_tokens", "seed", "device", "kv_cache_dtype",
                "gpu_memory_utilization", "kv_cache_memory_bytes", "tensor_parallel_size", "enforce_eager",
                "chat_template", "load_format", "async_scheduling", "activation_quant", "kv_offloading_size",
                "kv_offload_path", "kv_offload_disk_size", "speculative_config", "scheduling_policy",
                "generation_config", "override_generation_config", "quantization", "trust_remote_code",
                "max_logprobs", "hf_overrides")


def add_engine_flags(parser: argparse.ArgumentParser, *, with_model: bool = True) -> None:
    """Add the model positional and the engine options to ``parser``."""
    if with_model:
        parser.add_argument("model", nargs="?", default=None,
                            help="model directory, .gguf file or checkpoint (default: the embedded SmolLM2-135M)")
    g = parser.add_argument_group("engine")
    if with_model:
        g.add_argument("--model", dest="model_option", default=None, metavar="MODEL",
                       help="the model, as vLLM's --model spells it (the same as the positional argument)")
    g.add_argument("--tokenizer", default=None, help="tokenizer path if not the model's own")
    g.add_argument("--served-model-name", nargs="+", default=None,
                   help="name(s) clients use in `model` (default: the model path)")
    g.add_argument("--dtype", default=None, help="auto, float16, bfloat16, float32")
    g.add_argument("--max-model-len", type=int, default=None, help="context length (prompt + output)")
    g.add_argument("--block-size", type=int, default=None, help="tokens per KV cache block")
    g.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                   help="reuse KV blocks of shared prompt prefixes (default: on)")
    g.add_argument("--max-num-seqs", type=int, default=None, help="most requests in one batch")
    g.add_argument("--max-num-batched-tokens", type=int, default=None, help="token budget of one step")
    g.add_argument("--seed", type=int, default=None, help="engine random seed")
    g.add_argument("--device", default=None, help="auto, cpu, cuda, cuda:N")
    g.add_argument("--kv-cache-dtype", default=None, help="auto, float16, int8, fp8_e4m3, fp8_e5m2")
    g.add_argument("--activation-quant", choices=("none", "int8"), default=None,
                   help="int8: the CUDA quantized decode projections round activations to int8 (faster, not bit-equal "
                        "to none, the default fp16 path)")
    g.add_argument("--gpu-memory-utilization", type=float, default=None,
                   help="fraction of GPU memory the engine may use")
    g.add_argument("--kv-cache-memory-bytes", type=int, default=None, help="KV cache size (overrides the above)")
    g.add_argument("--tensor-parallel-size", "-tp", type=int, default=None,
                   help="GPUs (or CPU processes) to split the model over (tensor parallelism)")
    g.add_argument("--enforce-eager", action="store_true", default=None, help="do not capture CUDA graphs")
    g.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None,
                   help="prepare the next step while the GPU runs this one (default: on for CUDA)")
    g.add_argument("--chat-template", default=None, help="chat template (jinja text or a file holding it)")
    g.add_argument("--load-format", default=None, help="auto or dummy (random weights, for benchmarks)")
    g.add_argument("--speculative-config", type=json_object, default=None, metavar="JSON",
                   help='speculative decoding, e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\' (drafts '
                        'looked up in the prompt and output so far), \'{"model": "PATH", "num_speculative_tokens": '
                        "4}' (a smaller draft model of the same vocabulary) or '{\"method\": \"mtp\", "
                        "\"num_speculative_tokens\": 3}' (the checkpoint's own MTP head: Qwen3-Next, Qwen3.5)")
    g.add_argument("--hf-overrides", type=json_object, default=None, metavar="JSON",
                   help='values set on the model\'s config.json before it loads, e.g. \'{"rope_scaling": {"rope_type": '
                        '"yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}\' to serve a Qwen3 '
                        "model past 32K tokens with --max-model-len 131072")
    g.add_argument("--rope-scaling", type=json_object, default=None, metavar="JSON",
                   help="the same as --hf-overrides '{\"rope_scaling\": JSON}' (older vLLM command lines)")
    g.add_argument("--rope-theta", type=float, default=None, help="the rotary base, as an hf override")
    g.add_argument("--max-logprobs", type=int, default=None,
                   help="most logprobs per token a request may ask for (default 20; -1: no limit)")
    g.add_argument("--scheduling-policy", choices=("fcfs", "priority"), default=None,
                   help="fcfs (default), or priority: requests with a lower `priority` field run first")
    g.add_argument("--quantization", "-q", default=None,
                   help="awq, gptq (or vLLM's awq_marlin, gptq_marlin): checked against the checkpoint, whose own "
                        "quantization_config picks the kernels (default: whatever the checkpoint is)")
    g.add_argument("--trust-remote-code", action="store_true", default=None,
                   help="accepted for vLLM command lines; ReVolta never runs code shipped with a checkpoint")
    g.add_argument("--generation-config", default=None, metavar="auto|vllm|DIR",
                   help="sampling defaults for requests that do not set them: auto (default) the model's "
                        "generation_config.json (temperature, top_p, top_k, min_p, repetition_penalty; its "
                        "max_new_tokens limits every output), vllm none, or a directory holding such a file")
    g.add_argument("--override-generation-config", type=json_object, default=None, metavar="JSON",
                   help='merged over those defaults, e.g. \'{"temperature": 0.5}\'')
    o = parser.add_argument_group("KV offload (the revolta-offload package)")
    o.add_argument("--kv-offloading-size", type=float, default=None, metavar="GIB",
                   help="keep full KV blocks in this much CPU memory too, and copy them back for a prefix that "
                        "left the GPU cache instead of recomputing it")
    o.add_argument("--kv-offload-path", default=None, metavar="DIR",
                   help="also keep full KV blocks as files in this directory (they survive restarts)")
    o.add_argument("--kv-offload-disk-size", type=float, default=None, metavar="GIB",
                   help="most space the files under --kv-offload-path take (default 16)")


def _json_flag(value: str) -> Any:
    """A flag's JSON value (argparse reports a parse error as an invalid value)."""
    import json

    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from None


def json_object(value: str) -> dict:
    """A flag's JSON object."""
    parsed = _json_flag(value)
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return parsed


def json_list(value: str) -> list[str]:
    """A flag's JSON list of strings, e.g. ``'["https://a.example"]'`` (vLLM's form)."""
    parsed = _json_flag(value)
    if not isinstance(parsed, list) or not all(isinstance(v, str) for v in parsed):
        raise argparse.ArgumentTypeError('expected a JSON list of strings, e.g. \'["*"]\'')
    return parsed


def chat_template_text(value: str | None) -> str | None:
    """``--chat-template`` accepts the template itself or a path to a file with it."""
    if value is None:
        return None
    from pathlib import Path

    path = Path(value)
    try:
        if path.is_file():
            return path.read_text()
    except OSError:  # a long template is not a valid path
        pass
    return value


def engine_args_from(ns: argparse.Namespace) -> Any:
    """``EngineArgs`` with exactly the flags the user gave."""
    from revolta_engine import EngineArgs

    given: dict[str, Any] = {}
    model = model_argument(ns)
    if model is not None:
        given["model"] = model
    for name in ENGINE_FLAGS:
        value = getattr(ns, name, None)
        if value is None:
            continue
        if name == "served_model_name":
            value = value[0]
        elif name == "hf_overrides":
            value = dict(value)
        elif name == "chat_template":
            value = chat_template_text(value)
        given[name] = value
    rope = dict(getattr(ns, "rope_scaling", None) or {})
    if getattr(ns, "rope_theta", None) is not None:
        rope["rope_theta"] = ns.rope_theta
    if rope:
        overrides = dict(given.get("hf_overrides") or {})
        overrides["rope_scaling"] = {**overrides.get("rope_scaling", {}), **rope}
        given["hf_overrides"] = overrides
    return EngineArgs.from_kwargs(**given)


def llm_from(ns: argparse.Namespace) -> Any:
    """An offline ``LLM`` with exactly the engine flags the user gave."""
    from revolta_engine import LLM

    args = engine_args_from(ns)
    return LLM(**{k: getattr(args, k) for k in args.explicit})



def model_argument(ns: argparse.Namespace) -> str | None:
    """The model from the positional argument or ``--model`` (vLLM's old spelling); both, if different, is an error."""
    positional, option = getattr(ns, "model", None), getattr(ns, "model_option", None)
    if positional is not None and option is not None and positional != option:
        raise SystemExit(f"revolta: two models given: {positional!r} and --model {option!r}")
    return positional if positional is not None else option


def api_model_names(ns: argparse.Namespace, engine_name: str) -> list[str]:
    """Names the API accepts: the user's, else a short name for the default model plus the engine's own."""
    if ns.served_model_name:
        return list(ns.served_model_name)
    if model_argument(ns) is None:
        return ["SmolLM2-135M-Instruct", engine_name]
    return [engine_name]
