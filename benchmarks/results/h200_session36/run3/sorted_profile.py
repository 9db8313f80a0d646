"""One Qwen3.5-35B-A3B MoE layer's sorted path (quant_moe_sorted_bench's setup) run a few times at TOKENS, for ncu:
`ncu ... python3 sorted_profile.py TOKENS`. The profiled calls are the last ones (after warm-up)."""

import sys

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402
from quant_moe_sorted_bench import stacks  # noqa: E402

from revolta_engine.layers.quant import QuantConfig  # noqa: E402
from revolta_engine.layers.quant_moe import QuantizedExperts  # noqa: E402

tokens = int(sys.argv[1])
e, hidden, inter, top_k = 256, 2048, 512, 8
gen = torch.Generator(device="cuda").manual_seed(tokens)
x = torch.randn(tokens, hidden, device="cuda", generator=gen).half()
ids = torch.stack([torch.randperm(e, device="cuda", generator=gen)[:top_k] for _ in range(tokens)])
weights = torch.rand(tokens, top_k, device="cuda", generator=gen).softmax(-1).half()
experts = QuantizedExperts(0, hidden, inter, QuantConfig("awq", 4, 128), "profile")
experts.stacked = stacks(e, hidden, inter)
for _ in range(3):
    experts.sorted_gemm(x, weights, ids)
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("profiled")
experts.sorted_gemm(x, weights, ids)
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
