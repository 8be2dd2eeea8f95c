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
read half an answer. A file that cannot be read is a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

OFF = "off"


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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(head + b"\n" + blob)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass
