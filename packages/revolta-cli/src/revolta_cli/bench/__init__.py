"""``revolta bench``: load generation against a server (serve) and offline engine throughput."""
