"""Persistent input buffers: one step's inputs are packed on the host and reach the device in one copy.

Every index a forward pass needs (token ids, positions, cache slots, block tables, ...) is written into
one pinned host buffer and copied with a single non-blocking transfer into one device buffer; the tensors
the model sees are views of that device buffer. A pageable host tensor would make every such copy wait for
the GPU to go idle, which serialises the host's preparation of a step with the device's work on the last.

Host buffers alternate between two copies, so packing step N+1 never overwrites data that step N's copy
may not have read yet. CUDA graphs read their inputs from fixed offsets of the device buffer (the layout of
their padded batch size), so a replay needs no further copies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

_ALIGN = 16  # field starts in int32 elements (64 bytes): int64 views stay aligned, loads stay coalesced


def _up(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


@dataclass(frozen=True)
class Layout:
    """Offsets (in int32 elements) of one step's fields for ``tokens`` rows, ``seqs`` sequences, block
    tables ``width`` wide, ``rows`` sampled rows and ``feeds`` tokens fed from the last step's samples
    (``hidden_rows``: where the real tokens' rows lie in a padded graph step)."""

    tokens: int
    seqs: int
    width: int
    rows: int
    feeds: int

    @property
    def offsets(self) -> dict[str, int]:
        t, s = self.tokens, self.seqs
        sizes = [("input_ids", 2 * t), ("positions", 2 * t), ("slot_mapping", 2 * t),
                 ("query_start_loc", s + 1), ("context_lens", s), ("block_tables", s * self.width),
                 ("logits_indices", 2 * self.rows), ("feed_dst", 2 * self.feeds), ("feed_src", 2 * self.feeds),
                 ("hidden_rows", 2 * t)]
        out, at = {}, 0
        for name, size in sizes:
            out[name] = at
            at += _up(size)
        out["end"] = at
        return out


class StepBuffers:
    """Pinned host staging (two alternating copies) and the device buffer the model reads from."""

    def __init__(self, max_tokens: int, max_seqs: int, max_width: int, device: torch.device) -> None:
        self.device = device
        self.max_tokens, self.max_seqs, self.max_width = max_tokens, max_seqs, max_width
        # sampled rows: one per sequence, or one per fed token with speculative drafts
        size = Layout(max_tokens, max_seqs, max_width, max_tokens, max_seqs).offsets["end"]
        pin = device.type == "cuda"
        self.host = [torch.zeros(size, dtype=torch.int32, pin_memory=pin) for _ in range(2)]
        self.host_np = [h.numpy() for h in self.host]
        self.device_buf = torch.zeros(size, dtype=torch.int32, device=device)
        self._copied: list[torch.cuda.Event | None] = [None, None]
        self._turn = 0

    def fits(self, layout: Layout) -> bool:
        return (layout.tokens <= self.max_tokens and layout.seqs <= self.max_seqs
                and layout.width <= self.max_width and layout.rows <= self.max_tokens
                and layout.feeds <= self.max_seqs)

    def begin(self) -> np.ndarray:
        """The host buffer to pack the next step into (waits until its previous copy has been read)."""
        self._turn ^= 1
        event = self._copied[self._turn]
        if event is not None:
            event.synchronize()
        return self.host_np[self._turn]

    def upload(self, end: int) -> None:
        """Copy the first ``end`` elements of the buffer packed since :meth:`begin` to the device."""
        self.device_buf[:end].copy_(self.host[self._turn][:end], non_blocking=True)
        if self.device.type == "cuda":
            event = self._copied[self._turn] or torch.cuda.Event()
            event.record()
            self._copied[self._turn] = event

    def views(self, layout: Layout) -> dict[str, torch.Tensor]:
        """Device tensors of ``layout``'s fields (int64 fields viewed as such)."""
        o, buf = layout.offsets, self.device_buf
        t, s = layout.tokens, layout.seqs

        def i64(name: str, n: int) -> torch.Tensor:
            return buf[o[name]:o[name] + 2 * n].view(torch.int64)

        return {
            "input_ids": i64("input_ids", t), "positions": i64("positions", t),
            "slot_mapping": i64("slot_mapping", t),
            "query_start_loc": buf[o["query_start_loc"]:o["query_start_loc"] + s + 1],
            "context_lens": buf[o["context_lens"]:o["context_lens"] + s],
            "block_tables": buf[o["block_tables"]:o["block_tables"] + s * layout.width].view(s, layout.width),
            "logits_indices": i64("logits_indices", layout.rows),
            "feed_dst": i64("feed_dst", layout.feeds), "feed_src": i64("feed_src", layout.feeds),
            "hidden_rows": i64("hidden_rows", t),
        }


def host_views(buf: np.ndarray, layout: Layout) -> dict[str, np.ndarray]:
    """The same fields as :meth:`StepBuffers.views`, on a host buffer being packed."""
    o, t, s = layout.offsets, layout.tokens, layout.seqs

    def i64(name: str, n: int) -> np.ndarray:
        return buf[o[name]:o[name] + 2 * n].view(np.int64)

    return {
        "input_ids": i64("input_ids", t), "positions": i64("positions", t), "slot_mapping": i64("slot_mapping", t),
        "query_start_loc": buf[o["query_start_loc"]:o["query_start_loc"] + s + 1],
        "context_lens": buf[o["context_lens"]:o["context_lens"] + s],
        "block_tables": buf[o["block_tables"]:o["block_tables"] + s * layout.width].reshape(s, layout.width),
        "logits_indices": i64("logits_indices", layout.rows),
        "feed_dst": i64("feed_dst", layout.feeds), "feed_src": i64("feed_src", layout.feeds),
        "hidden_rows": i64("hidden_rows", t),
    }
