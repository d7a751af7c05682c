"""A local cache of decoded state files, addressed by their content (sha256 of the Parquet bytes).

A stateful checkpoint reads the files of every key group its records touch. Downloading and
decoding them grows with the state; the cache keeps each file decoded, as an Arrow IPC file that is
memory-mapped back, on the host that runs the checkpoint's driver (the run step's process in
connect mode). It can never be stale: an entry's name is the digest the manifest records for the
file, so a file rewritten by a retried run, or a state restored from elsewhere, has another name.
A file read from S3 is checked against its digest before it is used.

Where: ``$LOCKSTEP_STATE_CACHE`` (a folder; ``off`` disables it), else
``$XDG_CACHE_HOME/lockstep/state`` or ``~/.cache/lockstep/state``. Its size is kept under
``$LOCKSTEP_STATE_CACHE_BYTES`` (default 4 GiB): the least recently used entries go first.
"""
from __future__ import annotations

__all__ = [
    "DEFAULT_BYTES", "StateCache", "digest",
]

import hashlib
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

DEFAULT_BYTES = 4 * 2**30


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:32]


class StateCache:
    def __init__(self, folder: Path, max_bytes: int = DEFAULT_BYTES) -> None:
        self.folder = folder
        self.max_bytes = max_bytes

    @classmethod
    def from_env(cls) -> StateCache | None:
        where = os.environ.get("LOCKSTEP_STATE_CACHE", "")
        if where.lower() == "off":
            return None
        if where:
            folder = Path(where)
        else:
            base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
            folder = Path(base) / "lockstep" / "state"
        limit = os.environ.get("LOCKSTEP_STATE_CACHE_BYTES", "")
        return cls(folder, int(limit) if limit.isdigit() else DEFAULT_BYTES)

    def _path(self, name: str) -> Path:
        return self.folder / f"{name}.arrow"

    def get(self, name: str) -> pa.Table | None:
        """The decoded file of digest ``name``, memory-mapped, or None."""
        import pyarrow as pa

        path = self._path(name)
        try:
            table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
        except (OSError, pa.ArrowInvalid):
            return None
        try:
            os.utime(path)  # recently used: evicted last
        except OSError:
            pass
        return table

    def put(self, name: str, table: pa.Table) -> None:
        """Keep a decoded file (written aside, then renamed: a reader never sees half a file). A cache
        that cannot be written is no error: the checkpoint reads from S3."""
        self.put_all([(name, table)])

    def put_all(self, items: Sequence[tuple[str, pa.Table]]) -> None:
        """:meth:`put` of each (name, table), the cache trimmed to its size once after them: trimming lists
        the folder, and after each of a restore's few hundred files that was most of the time."""
        kept = [path for path in (self._write(name, table) for name, table in items) if path is not None]
        if kept:
            self._evict(keep=set(kept))

    def _write(self, name: str, table: pa.Table) -> Path | None:
        import pyarrow as pa

        path = self._path(name)
        if path.exists():
            return None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            part = self.folder / f".{name}.{uuid.uuid4().hex[:8]}.part"
            with pa.OSFile(str(part), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            os.replace(part, path)
        except OSError:
            return None
        return path

    def _evict(self, keep: set[Path]) -> None:
        """The least recently used entries go until the cache fits, never those in ``keep`` (the entries just
        written)."""
        entries = []
        for path in self.folder.glob("*.arrow"):
            try:
                st = path.stat()
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            if path in keep:
                continue
            try:
                path.unlink()
                total -= size
            except OSError:
                pass
