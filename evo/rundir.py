"""The run folder ``runs/<name>/``: config, events, checkpoints, best kernels, report.

Every file is written atomically (temp file in the same folder, fsync, rename), so a
crash leaves either the old or the new version, never half of one. The checkpoint keeps
its previous version beside it (``checkpoint.prev.json``) to fall back on.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from pathlib import Path

from genomes.errors import EvoError

CONFIG = "config.toml"
EVENTS = "events.jsonl"
CHECKPOINT = "checkpoint.json"
PREVIOUS = "checkpoint.prev.json"


class RunDirError(EvoError):
    """A run folder that is missing, not a run, or holds a damaged checkpoint."""


def default_name() -> str:
    return _dt.datetime.now().strftime("%Y-%m-%dT%H-%M-%S")


def write_atomic(path: Path, text: str | bytes) -> None:
    """Replace ``path`` with ``text`` so that readers see the old or the new file only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode() if isinstance(text, str) else text
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunDir:
    """One run's folder. ``create`` for a new run, ``open`` to resume or inspect one."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @classmethod
    def create(cls, path: Path, config_text: str) -> RunDir:
        path = Path(path)
        if (path / CHECKPOINT).exists() or (path / EVENTS).exists():
            raise RunDirError(f"{path} already holds a run; use --resume {path} or another --out")
        path.mkdir(parents=True, exist_ok=True)
        run = cls(path)
        write_atomic(path / CONFIG, config_text)
        return run

    @classmethod
    def open(cls, path: Path) -> RunDir:
        path = Path(path)
        if not path.is_dir():
            raise RunDirError(f"no such run folder: {path}")
        if not (path / CONFIG).is_file():
            raise RunDirError(f"{path} holds no run (no {CONFIG})")
        return cls(path)

    # --- config and events ---------------------------------------------------------
    def config_text(self) -> str:
        return (self.path / CONFIG).read_text()

    def write_config(self, text: str) -> None:
        write_atomic(self.path / CONFIG, text)

    def append_events(self, events: list[dict]) -> None:
        """Append events as JSON lines, flushed to disk before returning."""
        if not events:
            return
        with open(self.path / EVENTS, "a", encoding="utf-8") as f:
            for event in events:
                f.write(json.dumps(event, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def events(self) -> list[dict]:
        """All events; a torn last line (a crash mid-write) is skipped."""
        path = self.path / EVENTS
        if not path.exists():
            return []
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    # --- checkpoints -----------------------------------------------------------------
    def write_checkpoint(self, data: dict) -> None:
        # checkpoint.json exists at every instant: the old one is copied aside (not moved)
        # before the new one replaces it, so a kill between the two steps loses nothing.
        current = self.path / CHECKPOINT
        if current.exists():
            write_atomic(self.path / PREVIOUS, current.read_bytes())
        write_atomic(current, json.dumps(data, sort_keys=True, indent=1))

    def has_checkpoint(self) -> bool:
        return (self.path / CHECKPOINT).exists()

    def read_checkpoint(self, use_previous: bool = False) -> dict:
        path = self.path / (PREVIOUS if use_previous else CHECKPOINT)
        if not path.exists():
            raise RunDirError(f"{path} does not exist: nothing to resume")
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict) or "kernels" not in data:
                raise ValueError("not an evo checkpoint")
        except (ValueError, UnicodeDecodeError) as err:
            hint = ""
            if not use_previous and (self.path / PREVIOUS).exists():
                hint = "; the previous checkpoint can be used with --from-previous"
            raise RunDirError(f"corrupted checkpoint {path} ({err}){hint}") from None
        return data

    # --- results -----------------------------------------------------------------------
    def write_best(self, kernel: str, ptx: str, genome_json: dict) -> None:
        write_atomic(self.path / "best" / f"{kernel}.ptx", ptx)
        write_atomic(self.path / "best" / f"{kernel}.genome.json",
                     json.dumps(genome_json, indent=1, sort_keys=True) + "\n")

    def write_text(self, relative: str, text: str) -> Path:
        path = self.path / relative
        write_atomic(path, text)
        return path
