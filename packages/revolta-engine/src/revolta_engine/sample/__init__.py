"""Turning logits into tokens: logits processors, seeded sampling and logprobs."""
