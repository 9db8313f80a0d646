"""revolta-cli."""
