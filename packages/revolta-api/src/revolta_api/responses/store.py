"""Responses kept in memory for ``previous_response_id`` and ``GET /v1/responses/{id}`` (OpenAI's ``store``).

The most recent :data:`MAX_STORED` responses are kept (least recently used go first); a restart forgets them all.
Each holds the response object and its conversation as chat messages (the earlier turns, this input, this output)
but not its instructions: a later turn's own instructions replace them, as OpenAI does.
"""

from __future__ import annotations

from collections import OrderedDict
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
