"""Launch-wide proofs, kept: what ``genomes.lane_eval`` showed for every thread of a launch
costs seconds on a launch of millions of threads, and the same proof is asked again by
every genome that leaves its inputs as they were, in every process of a run's apply pool
(each a fresh interpreter), and by the next run on the same kernel.

``recall(kind, key)`` / ``keep(kind, key, value)``: ``kind`` names the proof
(``"addr_rebase/1"``); ``key`` is everything it read (the backward slice's text, the
accesses, the launch), hashed with the source of the ``genomes`` package, so that a proof
made by other code (an evo of another version, an edited checkout) is never taken for
this code's; ``value`` plain JSON data. A proof is a pure function of its key, so one kept
by another process or run is as good as one made here. Kept in this process (the last ``MEMORY``)
and, where ``use_folder`` names a folder (``harness.apply_pool`` names the tool cache's,
``harness.tool_cache``, which prunes it with the tools' answers), one file per proof,
``FOLDER/ab/abcdef...``, written to a temporary file and renamed so that no process reads
half of one. A file that cannot be read or written is a miss: the folder only saves time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Callable

from genomes.cache_files import write_quietly

MEMORY = 256  # proofs kept in this process

_memory: OrderedDict[str, object] = OrderedDict()
_lock = threading.Lock()  # a run's searches are threads of one process
_folder: Callable[[], Path | None] = lambda: None


def use_folder(folder: Callable[[], Path | None]) -> None:
    """Keep proofs on disk under ``folder()`` (asked at each use: None turns it off)."""
    global _folder
    _folder = folder


def _name(kind: str, key) -> str:
    return hashlib.sha256(f"proof\0{_source()}\0{kind}\0{key!r}".encode()).hexdigest()


@functools.cache
def _source() -> str:
    """A digest of the ``genomes`` package's Python source (what a proof means)."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"?")
    return digest.hexdigest()


def _path(name: str) -> Path | None:
    try:
        root = _folder()
    except Exception:  # a folder that cannot even be named: no disk
        return None
    return None if root is None else Path(root) / name[:2] / name


def recall(kind: str, key):
    """The value kept for this proof, or None."""
    name = _name(kind, key)
    with _lock:
        if name in _memory:
            _memory.move_to_end(name)
            return _memory[name]
    path = _path(name)
    if path is None:
        return None
    try:
        value = json.loads(path.read_text())
        os.utime(path)  # used now: the last to go when the folder is pruned
    except (OSError, ValueError):
        return None
    _remember(name, value)
    return value


def keep(kind: str, key, value) -> None:
    """Keep ``value`` (plain JSON data) as this proof's, here and on disk."""
    name = _name(kind, key)
    _remember(name, value)
    path = _path(name)
    if path is not None:
        write_quietly(path, json.dumps(value).encode())


def forget() -> None:
    """Empty this process's proofs (tests; the folder stays)."""
    with _lock:
        _memory.clear()


def _remember(name: str, value) -> None:
    with _lock:
        _memory[name] = value
        _memory.move_to_end(name)
        while len(_memory) > MEMORY:
            _memory.popitem(last=False)
