"""A launched step whose sampled tokens are still on their way to the host (asynchronous scheduling).

With asynchronous scheduling the engine launches step N+1 before it reads step N's sampled ids, so the
host's work (scheduling, packing inputs, output processing) overlaps the device's. The ids come back
through pinned host memory with one non-blocking copy and an event; reading them waits only for the
step that produced them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from revolta_engine.core.scheduler import ScheduledRequest
from revolta_engine.sample.sampler import SamplingRow


class HostTokenCopy:
    """Pinned landing buffers (two, used in turn) for sampled ids copied from the device."""

    def __init__(self, max_rows: int, device: torch.device) -> None:
        self.device = device
        pin = device.type == "cuda"
        self.buffers = [torch.empty(max_rows, dtype=torch.int64, pin_memory=pin) for _ in range(2)]
        self._turn = 0

    def start(self, token_ids: torch.Tensor) -> PendingTokens:
        """Begin copying ``token_ids`` to the host; nothing waits here."""
        if self.device.type != "cuda":
            return PendingTokens(token_ids, None)
        self._turn ^= 1
        n = token_ids.shape[0]
        if n > self.buffers[self._turn].shape[0]:
            self.buffers[self._turn] = torch.empty(n, dtype=torch.int64, pin_memory=True)
        host = self.buffers[self._turn][:n]
        host.copy_(token_ids, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return PendingTokens(host, event)


@dataclass
class PendingTokens:
    """Sampled ids in (or on their way to) host memory."""

    host: torch.Tensor
    event: torch.cuda.Event | None

    def wait(self) -> list[int]:
        if self.event is not None:
            self.event.synchronize()
        return self.host.tolist()


@dataclass
class InFlightStep:
    """What the engine needs to finish a launched step once its sampled ids arrive."""

    scheduled: list[ScheduledRequest]
    completing: list[ScheduledRequest]
    rows: list[SamplingRow]
    logits: torch.Tensor | None  # kept only when some row asked for logprobs
    tokens: PendingTokens | None  # None when no row samples
