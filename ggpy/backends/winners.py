"""The autotune winners both backends keep (CPUBackend / CUDABackend(autotune=True)): {key: [winner, {candidate:
seconds or None}]} in the process and in one JSON file per backend and machine under `$GGPY_AUTOTUNE_CACHE`
(default ~/.cache/ggpy/autotune), so a second process measures nothing. Each backend's autotune.py makes the keys
and does the measuring; the implementation of a node is tuned here the same way for both (tuned_impl)."""
from __future__ import annotations

import json
import os
from pathlib import Path


def _valid(value) -> bool:
    return (isinstance(value, list) and len(value) == 2 and isinstance(value[0], (str, type(None)))
            and isinstance(value[1], dict))


class Winners:
    """One backend's and machine's winners: `memory` in this process, the file `<file_name>.json` on disk;
    `stats` counts measurements, process hits and disk hits."""

    def __init__(self, file_name: str):
        self.file_name = file_name
        self.memory: dict = {}
        self.stats = {"measured": 0, "hits": 0, "disk_hits": 0}

    def path(self) -> Path:
        root = os.environ.get("GGPY_AUTOTUNE_CACHE") or Path.home() / ".cache" / "ggpy" / "autotune"
        return Path(root) / f"{self.file_name}.json"

    def _disk(self) -> dict:
        try:
            entries = json.loads(self.path().read_text())
        except (OSError, ValueError):
            return {}
        return entries if isinstance(entries, dict) else {}

    def _write(self, entries: dict):
        """Write the file (a temp file renamed over it: no torn file); a read-only cache only costs time."""
        path = self.path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(entries))
            os.replace(tmp, path)
        except OSError:
            pass

    def winner(self, key):
        """key's winner measured or read in this process (None: none)."""
        return self.memory.get(key, (None,))[0]

    def lookup(self, key, measure, nothing_now: tuple = ()) -> list:
        """key's [winner, times]: from this process, the disk, or measure() (then kept in both). An exception of
        `nothing_now` from measure() (no room or no way to measure now) gives [None, {}], kept nowhere."""
        if key in self.memory:
            self.stats["hits"] += 1
            return self.memory[key]
        stored = self._disk().get(repr(key))
        if _valid(stored):
            self.stats["disk_hits"] += 1
            self.memory[key] = stored
            return stored
        try:
            value = list(measure())
        except nothing_now:
            return [None, {}]
        self.stats["measured"] += 1
        self.memory[key] = value
        entries = self._disk()
        entries[repr(key)] = value
        self._write(entries)
        return value

    def forget(self, key):
        """Drop key's winner from this process and from the disk (to measure it again)."""
        self.memory.pop(key, None)
        entries = self._disk()
        if entries.pop(repr(key), None) is not None:
            self._write(entries)


def tuned_impl(backend, entry, node) -> str | None:
    """The measured implementation of `node` (None when fewer than two can run it: the entry's choice stands):
    backend.winners keyed by backend.tune_key(node), measured by backend.measure_impls(entry, node, impls)."""
    impls = entry.candidates(node, backend)
    if len(impls) < 2:
        return None
    winner = backend.winners.lookup(backend.tune_key(node), lambda: backend.measure_impls(entry, node, impls),
                                    backend.measure_errors)[0]
    return winner if winner in impls else None
