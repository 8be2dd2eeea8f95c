"""Answers of ptxas and cuobjdump kept on disk, keyed by exactly what they were given.

Both tools are pure functions of their binary, their arguments and the input bytes, and evo
asks them the same questions again and again: the CPU suite assembled 1,423 single-gene
variants of 220 distinct PTX texts; a static run disassembled code another store already
had; ``evo bench`` compiled 2,660 times for 1,036 distinct inputs (issue 32). ``key`` names
one question (the tool's resolved path, size and modification time; the arguments; the
input bytes) and ``lookup``/``keep`` read and write its answer: the exit status, the text
printed and the bytes written (a cubin). Only answers of a tool that ran and exited are
kept: a timeout, a crash (killed by a signal) or a missing tool says nothing about the
input, and is asked again next time.

Where: ``$EVO_TOOL_CACHE`` (``off`` turns the cache off), else
``$XDG_CACHE_HOME/evo/tools``, else ``~/.cache/evo/tools``; one file per answer, named by
the key, written to a temporary file and renamed, so processes sharing the folder never
read half an answer. A file that cannot be read is a miss. Size: one CPU suite run left
7,034 answers, 126 MB; the folder is kept under ``$EVO_TOOL_CACHE_MB`` (default 1024):
about one write in 256 looks, and removes the answers used least recently (a hit
touches its file) down to three quarters of it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from genomes.cache_files import write_quietly

OFF = "off"
DEFAULT_MB = 1024


def folder() -> Path | None:
    """The cache folder, or None when ``EVO_TOOL_CACHE=off``."""
    chosen = os.environ.get("EVO_TOOL_CACHE", "")
    if chosen == OFF:
        return None
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "evo" / "tools"


def key(tool: Path, args, data: bytes) -> str:
    """The name of one question: the tool binary as it is on disk, the arguments, the input."""
    real = Path(tool).resolve()
    try:
        stat = real.stat()
        identity = f"{real}\0{stat.st_size}\0{stat.st_mtime_ns}"
    except OSError:
        identity = str(real)
    h = hashlib.sha256(identity.encode())
    h.update(b"\1" + "\0".join(map(str, args)).encode() + b"\1")
    h.update(data)
    return h.hexdigest()


def _path(name: str) -> Path | None:
    root = folder()
    return None if root is None else root / name[:2] / name


def lookup(name: str) -> tuple[int, str, bytes] | None:
    """(exit status, text, bytes) kept for the question ``name``, or None."""
    path = _path(name)
    if path is None:
        return None
    try:
        raw = path.read_bytes()
        head, _, blob = raw.partition(b"\n")
        meta = json.loads(head)
        if len(blob) != meta["size"]:
            return None  # cut short: treat as a miss
        try:
            os.utime(path)  # used now: the last to go when the folder is pruned
        except OSError:
            pass
        return int(meta["returncode"]), str(meta["text"]), blob
    except (OSError, ValueError, KeyError, TypeError):
        return None


def keep(name: str, returncode: int | None, text: str, blob: bytes = b"") -> None:
    """Keep the answer to ``name`` where it says something about the input (module
    docstring); a folder that cannot be written is no error: the cache is an optimisation."""
    path = _path(name)
    if path is None or returncode is None or returncode < 0:
        return
    head = json.dumps({"returncode": returncode, "text": text, "size": len(blob)}).encode()
    write_quietly(path, head + b"\n" + blob)
    if name.startswith("00"):  # one write in 256: a look at the folder's size
        prune()


def prune(limit_mb: float | None = None) -> int:
    """Remove the answers used least recently until the folder holds at most three
    quarters of ``limit_mb`` (default ``$EVO_TOOL_CACHE_MB`` or 1024), when it holds more
    than ``limit_mb``; returns how many were removed."""
    root = folder()
    if root is None or not root.is_dir():
        return 0
    if limit_mb is None:
        try:
            limit_mb = float(os.environ.get("EVO_TOOL_CACHE_MB", DEFAULT_MB))
        except ValueError:
            limit_mb = DEFAULT_MB
    files = []
    for path in root.glob("*/*"):
        try:
            st = path.stat()
        except OSError:
            continue  # removed meanwhile by another process
        files.append((st.st_mtime, st.st_size, path))
    total, limit = sum(f[1] for f in files), limit_mb * (1 << 20)
    if total <= limit:
        return 0
    removed = 0
    for _, size, path in sorted(files):
        if total <= 0.75 * limit:
            break
        path.unlink(missing_ok=True)
        total -= size
        removed += 1
    return removed
