"""Responses kept in memory for ``previous_response_id`` and ``GET /v1/responses/{id}`` (OpenAI's ``store``).

The most recent :data:`MAX_STORED` responses are kept (least recently used go first); a restart forgets them all.
Background responses (``background: true``) run as tasks here until they finish or are cancelled.
Each holds the response object and its conversation as chat messages (the earlier turns, this input, this output)
but not its instructions: a later turn's own instructions replace them, as OpenAI does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

MAX_STORED = 1024


@dataclass
class StoredResponse:
    """One stored response."""

    response: dict[str, Any]
    conversation: list[dict[str, Any]]


class ResponseStore:
    """A bounded LRU of stored responses by id."""

    def __init__(self, max_entries: int = MAX_STORED) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()
        # background responses still generating: their task, and their response object as it stands
        self._running: dict[str, tuple[asyncio.Task, Callable[[], dict[str, Any]]]] = {}

    def put(self, response: dict[str, Any], conversation: list[dict[str, Any]]) -> None:
        self._entries[response["id"]] = StoredResponse(response, conversation)
        self._entries.move_to_end(response["id"])
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def get(self, response_id: str) -> StoredResponse | None:
        entry = self._entries.get(response_id)
        if entry is not None:
            self._entries.move_to_end(response_id)
        return entry

    def delete(self, response_id: str) -> bool:
        return self._entries.pop(response_id, None) is not None

    def run_in_background(self, response_id: str, work: Coroutine[Any, Any, None],
                          live: Callable[[], dict[str, Any]]) -> None:
        """Run ``work`` (which stores the response when it ends) as a task of this store; until then ``live``
        gives the response object as it stands (the output so far)."""
        task = asyncio.create_task(work, name=f"background response {response_id}")
        self._running[response_id] = task, live
        task.add_done_callback(lambda _: self._running.pop(response_id, None))

    def current(self, response_id: str) -> dict[str, Any] | None:
        """The response object now: a running background response's output so far, else the stored one."""
        running = self._running.get(response_id)
        if running is not None:
            return running[1]()
        entry = self.get(response_id)
        return None if entry is None else entry.response

    async def cancel(self, response_id: str) -> bool:
        """Stop a running background response and wait until it has stored itself as cancelled."""
        running = self._running.get(response_id)
        if running is None:
            return False
        task = running[0]
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return True

    async def cancel_all(self) -> None:
        """Stop every background response (the server is shutting down)."""
        for response_id in list(self._running):
            await self.cancel(response_id)
