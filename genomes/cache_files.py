"""A file of one of evo's caches (the tool cache's answers, ``genomes.proofs``), written to
a temporary file beside it and renamed, so that a process reading it sees the old file or
the new one, never half of one. A cache only saves time: a folder that cannot be written
is no error."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_quietly(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``; nothing on an ``OSError`` (and no file left behind)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return
