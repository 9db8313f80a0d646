"""Executes scheduled batches on a device: inputs, attention metadata, KV cache, forward pass."""
