"""Tensor parallelism: which shard this process holds, the collectives between shards, and the worker processes
that hold the other shards (gloo on the CPU, NCCL on GPUs)."""

from revolta_engine.distributed.parallel_state import (
    TensorParallelLayout,
    get_tp_layout,
    tensor_parallel_layout,
)

__all__ = ["TensorParallelLayout", "get_tp_layout", "tensor_parallel_layout"]
