"""Where a checkpoint's objects live: one folder per checkpoint id, zero-padded so that S3's listing
order is the ids' order. The checkpoint documents (`checkpoint_store`) and the keyed state's files
(`state_files`) share it."""
from __future__ import annotations

__all__ = [
    "ID_WIDTH", "checkpoint_folder",
]

#: Digits of a checkpoint id in its folder's name (``000000000042/``).
ID_WIDTH = 12


def checkpoint_folder(prefix: str, checkpoint_id: int) -> str:
    """``<prefix><id, ID_WIDTH digits>/``."""
    return f"{prefix}{checkpoint_id:0{ID_WIDTH}d}/"
