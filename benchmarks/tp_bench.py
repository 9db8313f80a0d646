"""Tensor parallelism: decode and prefill speed, and the weight bytes rank 0 holds, at tensor_parallel_size 1
and N side by side (dummy weights, rounds interleaved so machine drift falls on both).

CPU (gloo, one process per rank): a Llama-shaped model of about 0.4 B parameters by default. GPUs (NCCL): pass
``--config benchmarks/configs/llama-3.1-8b --device cuda`` on a machine with N GPUs.

    python3 benchmarks/tp_bench.py --tp 2 --out bench_out/tp.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from revolta_engine import LLM, SamplingParams

# Llama-shaped, ~0.4 B parameters: large enough that weight streaming dominates a CPU decode step
DEFAULT_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1536, "intermediate_size": 4096,
    "num_hidden_layers": 12, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 96,
    "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
    "bos_token_id": 1, "eos_token_id": 2,
}


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


FULL_THREADS = torch.get_num_threads()


def timed(llm: LLM, prompts: list[list[int]], params: SamplingParams) -> tuple[float, int]:
    # one engine at tensor_parallel_size 1 uses every core; a split one gives rank 0 its share (as the engine does)
    tp = llm.llm_engine.config.parallel.tensor_parallel_size
    torch.set_num_threads(max(1, FULL_THREADS // tp) if llm.llm_engine.device.type == "cpu" else FULL_THREADS)
    _sync()
    t0 = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    _sync()
    return time.perf_counter() - t0, sum(len(o.outputs[0].token_ids) for o in outs)


def weight_bytes(llm: LLM) -> int:
    return sum(p.numel() * p.element_size() for p in llm.llm_engine.model.parameters())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=None, help="a directory with config.json (default: ~0.4 B Llama)")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prefill-len", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("bench_out/tp.json"))
    args = ap.parse_args(argv)
    tmp = None
    config = args.config
    if config is None:
        tmp = tempfile.TemporaryDirectory()
        config = Path(tmp.name)
        (config / "config.json").write_text(json.dumps(DEFAULT_CONFIG))
    common = dict(load_format="dummy", skip_tokenizer_init=True, max_model_len=2048, device=args.device,
                  kv_cache_memory_bytes=512 << 20, max_num_batched_tokens=2048, enable_prefix_caching=False)
    engines = {1: LLM(str(config), **common), args.tp: LLM(str(config), tensor_parallel_size=args.tp, **common)}
    vocab = json.loads((config / "config.json").read_text())["vocab_size"]
    gen = torch.Generator().manual_seed(0)

    def prompts(n: int, length: int) -> list[list[int]]:
        return [torch.randint(3, vocab, (length,), generator=gen).tolist() for _ in range(n)]

    result: dict = {"config": str(args.config or "default ~0.4B Llama"), "tp": args.tp,
                    "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                    "torch_threads_tp1": FULL_THREADS,
                    "rank0_weight_bytes": {str(tp): weight_bytes(llm) for tp, llm in engines.items()}}
    decode = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    first = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    for llm in engines.values():
        timed(llm, prompts(1, 16), decode)  # warm-up
    for batch in args.batch:
        rates: dict[int, list[float]] = {tp: [] for tp in engines}
        for _ in range(args.rounds):
            batch_prompts = prompts(batch, 16)
            for tp, llm in engines.items():
                seconds, tokens = timed(llm, batch_prompts, decode)
                rates[tp].append(tokens / seconds)
        result[f"decode_batch{batch}_tok_s"] = {str(tp): statistics.median(r) for tp, r in rates.items()}
    times: dict[int, list[float]] = {tp: [] for tp in engines}
    for _ in range(args.rounds):
        long_prompt = prompts(1, args.prefill_len)
        for tp, llm in engines.items():
            times[tp].append(timed(llm, long_prompt, first)[0])
    result[f"prefill_{args.prefill_len}_s"] = {str(tp): statistics.median(t) for tp, t in times.items()}
    for llm in engines.values():
        llm.shutdown()
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
