"""revolta-api."""
