"""Tensor parallelism (gloo on the CPU, NCCL on GPUs).

- :mod:`.state`: which shard this process holds, and the process groups that join the shards
- :mod:`.communication`: the collectives a split forward pass needs
- :mod:`.sharding`: a rank's slice of a whole checkpoint tensor
- :mod:`.shard_runtime`: the model shard, KV cache and runner every rank builds the same way
- :mod:`.launcher`: rank 0 starts and watches the worker processes and drives them each step
- :mod:`.worker`: a worker process's main loop (ranks 1..N-1)
- :mod:`.step_plan`: what rank 0 sends the workers each step
- :mod:`.kv_offload`: KV offload with every rank keeping its own shard of each block

Only the layout is re-exported here: the layers import this package, and the launcher and worker import the
models, so importing them here would be a cycle.
"""

from revolta_engine.parallel.state import (
    TensorParallelLayout,
    get_tp_layout,
    tensor_parallel_layout,
)

__all__ = ["TensorParallelLayout", "get_tp_layout", "tensor_parallel_layout"]
