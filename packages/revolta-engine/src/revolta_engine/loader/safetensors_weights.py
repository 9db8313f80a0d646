"""Find and stream the safetensors weights of an HF checkpoint directory (single file or sharded index)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
from safetensors import safe_open

from revolta_engine.errors import ModelLoadError

logger = logging.getLogger(__name__)

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


class SafetensorsWeights:
    """Weights in one or more safetensors files; with an index, every indexed tensor and shard must be read.

    ``expected`` maps each file to the tensor names the index places in it (None: take what the file holds).
    """

    def __init__(
        self, root: Path, expected: Mapping[Path, list[str] | None], index_path: Path | None = None
    ) -> None:
        self.root = root
        self.expected = dict(expected)
        self.index_path = index_path
        self._read_files: set[Path] = set()
        self._read_tensors: set[str] = set()

    @property
    def files(self) -> list[Path]:
        """The weight files, in reading order."""
        return list(self.expected)

    def iter_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield ``(name, tensor)`` file by file, in each file's stored dtype."""
        self._read_files.clear()
        self._read_tensors.clear()
        for path, names in self.expected.items():
            with _open(path) as f:
                present = list(f.keys())
                if names is None:
                    names = present
                else:
                    missing = sorted(set(names) - set(present))
                    if missing:
                        raise ModelLoadError(
                            f"Tensor {missing[0]!r} is listed in {self.index_path} for shard {path} but that "
                            f"file does not contain it ({len(missing)} tensor(s) missing: {missing[:5]})."
                        )
                for name in names:
                    yield name, f.get_tensor(name)
                    self._read_tensors.add(name)
            self._read_files.add(path)

    def tensors_with_prefix(self, prefix: str) -> dict[str, torch.Tensor]:
        """Only the tensors whose names start with ``prefix`` (a head stored beside the model, such as
        ``mtp.``), read without streaming the rest; does not count as a pass of :meth:`iter_weights`."""
        out: dict[str, torch.Tensor] = {}
        for path, names in self.expected.items():
            if names is not None and not any(n.startswith(prefix) for n in names):
                continue
            with _open(path) as f:
                for name in f.keys():
                    if name.startswith(prefix):
                        out[name] = f.get_tensor(name)
        return out

    def check_all_read(self) -> None:
        """Raise ModelLoadError naming any weight file or indexed tensor that was not read."""
        unread = [str(p) for p in self.expected if p not in self._read_files]
        if unread:
            raise ModelLoadError(
                f"Checkpoint shard(s) left unread: {unread}. Every file listed in "
                f"{self.index_path or 'the checkpoint'} must be loaded."
            )
        for names in self.expected.values():
            for name in names or ():
                if name not in self._read_tensors:
                    raise ModelLoadError(f"Tensor {name!r} of {self.index_path} was not read.")


def _open(path: Path):
    """A safetensors file opened for reading tensors to the CPU; a corrupt header is a ModelLoadError."""
    try:
        return safe_open(str(path), framework="pt", device="cpu")
    except Exception as exc:  # safetensors raises its own error types for corrupt headers
        raise ModelLoadError(f"Cannot read safetensors file {path}: {exc}") from exc


def find_safetensors(root: Path) -> SafetensorsWeights:
    """Locate the weights of checkpoint directory ``root``; raise ModelLoadError when there are none."""
    index = root / INDEX_NAME
    if not index.is_file():
        others = sorted(root.glob("*.safetensors.index.json"))
        index = others[0] if len(others) == 1 else index
    if index.is_file():
        return _from_index(root, index)
    single = root / SINGLE_NAME
    if single.is_file():
        return SafetensorsWeights(root, {single: None})
    files = sorted(root.glob("*.safetensors"))
    if files:
        return SafetensorsWeights(root, {f: None for f in files})
    if any(root.glob("*.bin")) or any(root.glob("*.pt")) or any(root.glob("*.pth")):
        raise ModelLoadError(
            f"{root} holds only PyTorch pickle weights (*.bin/*.pt); ReVolta reads safetensors. Convert it, e.g. "
            "load with transformers and `save_pretrained(dir)` (safetensors is the default)."
        )
    raise ModelLoadError(
        f"No weights found in {root}: expected {SINGLE_NAME}, {INDEX_NAME} with its shards, or *.safetensors files."
    )


def _from_index(root: Path, index: Path) -> SafetensorsWeights:
    try:
        data = json.loads(index.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"Cannot parse the safetensors index {index}: {exc}") from exc
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelLoadError(
            f"The safetensors index {index} has no 'weight_map' of tensor name -> shard file."
        )
    expected: dict[Path, list[str]] = {}
    resolved_root = root.resolve()
    for name, rel in weight_map.items():
        shard = (index.parent / str(rel)).resolve()
        if not shard.is_relative_to(resolved_root):
            raise ModelLoadError(f"The index {index} points tensor {name!r} outside the checkpoint: {rel!r}.")
        expected.setdefault(shard, []).append(name)
    missing = [p for p in expected if not p.is_file()]
    if missing:
        names = [str(p.relative_to(resolved_root)) for p in missing]
        raise ModelLoadError(f"Shard file(s) listed in {index} are missing: {names} (looked in {root}).")
    ordered = dict(sorted(expected.items(), key=lambda item: str(item[0])))
    logger.info("Checkpoint %s: %d tensors in %d safetensors shard(s)", root, len(weight_map), len(ordered))
    return SafetensorsWeights(root, ordered, index)
