"""The waiting queue under a scheduling policy: first come first served, or by priority (vLLM's
``scheduling_policy``; a lower ``priority`` value goes first, then the earlier arrival)."""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator

from revolta_engine.core.request import Request

POLICIES = ("fcfs", "priority")


class FCFSQueue:
    """Arrival order; a preempted request goes back to the front."""

    def __init__(self) -> None:
        self._items: deque[Request] = deque()

    def append(self, request: Request) -> None:
        self._items.append(request)

    def push_back_preempted(self, request: Request) -> None:
        self._items.appendleft(request)

    def popleft(self) -> Request:
        return self._items.popleft()

    def remove(self, request: Request) -> None:
        self._items.remove(request)

    def __getitem__(self, index: int) -> Request:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._items)

    def __contains__(self, request: object) -> bool:
        return request in self._items


class PriorityQueue(FCFSQueue):
    """Ordered by ``(priority, arrival time)`` (:func:`running_order`), ties in insertion order; a preempted request
    takes its place again by that order."""

    def __init__(self) -> None:
        self._sorted: list[Request] = []

    def append(self, request: Request) -> None:
        bisect.insort_right(self._sorted, request, key=running_order)

    push_back_preempted = append

    def popleft(self) -> Request:
        return self._sorted.pop(0)

    def remove(self, request: Request) -> None:
        del self._sorted[next(i for i, r in enumerate(self._sorted) if r is request)]

    def __getitem__(self, index: int) -> Request:
        return self._sorted[index]

    def __len__(self) -> int:
        return len(self._sorted)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._sorted)

    def __contains__(self, request: object) -> bool:
        return any(r is request for r in self._sorted)


def make_queue(policy: str) -> FCFSQueue:
    """The waiting queue of ``policy`` (one of :data:`POLICIES`)."""
    return PriorityQueue() if policy == "priority" else FCFSQueue()


def running_order(request: Request) -> tuple[int, float]:
    """Where a request stands among the running ones under the priority policy (the last is preempted first)."""
    return request.priority, request.arrival_time
