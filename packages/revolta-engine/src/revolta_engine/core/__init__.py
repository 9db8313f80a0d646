"""Requests, the KV block pool, prefix caching and the token-budget scheduler."""
