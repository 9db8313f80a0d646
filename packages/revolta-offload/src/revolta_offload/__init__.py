"""revolta-offload."""
