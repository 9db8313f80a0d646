"""revolta-engine."""
