"""The run folder ``runs/<name>/``: config, events, checkpoints, best kernels, report.

Every file is written atomically (temp file in the same folder, fsync, rename), so a
crash leaves either the old or the new version, never half of one. The checkpoint keeps
its previous version beside it (``checkpoint.prev.json``) to fall back on. events.jsonl
is appended to, each row stamped with the time it was written (``time``, ISO 8601 UTC);
each checkpoint records how many of its bytes it covers, and a resume cuts it back to that,
so an interrupted generation's rows are not written twice. ``meta.json`` says what ran
(``evo.runmeta``); ``latest`` beside the newest run folder links to it.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import tempfile
from pathlib import Path

from genomes.errors import EvoError, RuntimeFailure

from evo.checkpoint import EVENTS_BYTES
from evo.checkpoint import dumps as checkpoint_text
from evo.checkpoint import FILE as CHECKPOINT

CONFIG = "config.toml"
EVENTS = "events.jsonl"
PREVIOUS = "checkpoint.prev.json"
META = "meta.json"
LATEST = "latest"


class RunDirError(EvoError):
    """A run folder that is missing, not a run, or holds a damaged checkpoint."""


class RunDirWriteError(RunDirError, RuntimeFailure):
    """A run's file or folder that the system will not let evo write."""


def default_name() -> str:
    return _dt.datetime.now().strftime("%Y-%m-%dT%H-%M-%S")


def utc_now() -> str:
    """Now, ISO 8601 in UTC to the millisecond: ``2025-01-31T12:00:00.123Z``."""
    now = _dt.datetime.now(_dt.timezone.utc)
    return now.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_atomic(path: Path, text: str | bytes) -> None:
    """Replace ``path`` with ``text`` so that readers see the old or the new file only.

    The file gets the mode a plain ``open`` would give it (0666 less the umask; mkstemp's
    own 0600 would hide a run from the rest of a group). A path that cannot be written is
    one RunDirError naming it, and leaves nothing behind.
    """
    path = Path(path)
    data = text.encode() if isinstance(text, str) else text
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise RunDirWriteError(_cannot_write(path, err)) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise RunDirWriteError(_cannot_write(path, err)) from None
        raise


def _cannot_write(path: Path, err: OSError) -> str:
    return f"cannot write {path}: {_why(path, err)}; choose another place or make it writable"


def _why(path: Path, err: OSError) -> str:
    """Why ``path`` could not be made: a regular file where a folder should be says so."""
    blocker = next((p for p in path.parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        return f"{blocker} is a file, not a folder"
    return err.strerror or str(err)


def _umask() -> int:
    """The process's umask, read from /proc where possible: ``os.umask`` can only read it by
    setting it, which races with other threads creating files."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class RunDir:
    """One run's folder. ``create`` for a new run, ``open`` to resume or inspect one."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.created = False  # whether create() made the folder (discard() may remove it)
        self.fresh = False  # a new run (create()), not one opened to resume or inspect

    @classmethod
    def create(cls, path: Path, config_text: str) -> RunDir:
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise RunDirError(f"{path} is a file, not a run folder: name a new folder with --out")
        if (path / CHECKPOINT).exists() or (path / EVENTS).exists():
            raise RunDirError(f"{path} already holds a run; use --resume {path} or another --out")
        if path.is_dir() and any(path.iterdir()):
            raise RunDirError(f"{path} is a folder with other files in it, not a run: name a new "
                              "or empty folder with --out")
        run = cls(path)
        run.created, run.fresh = not path.is_dir(), True
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise RunDirWriteError(f"cannot create run folder {path}: {_why(path, err)}; "
                                   f"name a writable folder with --out") from None
        try:
            write_atomic(path / CONFIG, config_text)
        except RunDirError:
            run.discard()
            raise
        return run

    def discard(self) -> bool:
        """Remove what ``create`` wrote when the run never got going (no events, no
        checkpoint), so that a run failing before its first evaluation leaves no folder
        holding only config.toml and meta.json; the folder goes only if ``create`` made it,
        and ``latest`` too where it points here."""
        if (self.path / EVENTS).exists() or (self.path / CHECKPOINT).exists():
            return False
        if self.created:
            shutil.rmtree(self.path, ignore_errors=True)
        else:
            (self.path / CONFIG).unlink(missing_ok=True)
            (self.path / META).unlink(missing_ok=True)
        latest = self.path.parent / LATEST
        if latest.is_symlink() and os.readlink(latest) == self.path.name:
            latest.unlink(missing_ok=True)
        return True

    def link_latest(self) -> None:
        """Point ``latest`` in the folder holding this run (runs/latest) at it: a relative
        link, replaced atomically (a new link renamed over the old). Skipped silently where
        symlinks cannot be made, or where ``latest`` is a real file or folder (not ours)."""
        latest = self.path.parent / LATEST
        if self.path.name == LATEST or (latest.exists() and not latest.is_symlink()):
            return
        tmp = self.path.parent / f".{LATEST}.{os.getpid()}.tmp"
        try:
            tmp.unlink(missing_ok=True)
            os.symlink(self.path.name, tmp, target_is_directory=True)
            os.replace(tmp, latest)
        except (OSError, NotImplementedError):
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass

    def check_writable(self) -> None:
        """One RunDirError now, rather than a failure after a generation's work, when the
        run's files cannot be written (a read-only folder or events.jsonl)."""
        try:
            if (self.path / EVENTS).exists():
                open(self.path / EVENTS, "a").close()
            fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".write-check.", suffix=".tmp")
            os.close(fd)
            os.unlink(tmp)
        except OSError as err:
            raise RunDirWriteError(f"cannot write to run folder {self.path} ({err.filename}: "
                                   f"{err.strerror or err}): make it writable, or resume a "
                                   f"writable copy of it") from None

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
        """Append events as JSON lines, each stamped with ``time`` (now, ISO 8601 UTC; the
        caller's dicts are left as they are), flushed to disk before returning."""
        if not events:
            return
        now = utc_now()
        try:
            with open(self.path / EVENTS, "a", encoding="utf-8") as f:
                for event in events:
                    f.write(json.dumps({**event, "time": now}, sort_keys=True) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:
            raise RunDirWriteError(_cannot_write(self.path / EVENTS, err)) from None

    def events_size(self) -> int:
        """The size of events.jsonl in bytes (0 when it does not exist yet)."""
        try:
            return (self.path / EVENTS).stat().st_size
        except FileNotFoundError:
            return 0

    def rewind_events(self, size: int | None) -> None:
        """Cut events.jsonl back to ``size`` bytes, what it held when the checkpoint being
        resumed was written: the rows after it (a generation interrupted by SIGINT, SIGTERM
        or SIGKILL, perhaps a torn line) are written again by the resumed run, which repeats
        that generation, so the file ends as an uninterrupted run's would.

        Nothing happens when ``size`` is None (a checkpoint from before this was recorded),
        when the file is no longer than ``size`` (lost or cut short in a crash: never pad it),
        or when the cut would not fall at the end of a line (not the file the checkpoint
        saw). One ``ftruncate``, so a kill leaves the old or the new length; a resume
        killed again simply cuts again."""
        path = self.path / EVENTS
        if size is None or not path.exists():
            return
        try:
            with open(path, "r+b") as f:
                if f.seek(0, os.SEEK_END) <= size:
                    return
                if size > 0:
                    f.seek(size - 1)
                    if f.read(1) != b"\n":
                        return
                f.truncate(size)
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:
            raise RunDirWriteError(_cannot_write(path, err)) from None

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
    def write_checkpoint(self, data: dict, encoded: dict | None = None) -> None:
        # checkpoint.json exists at every instant: the old one is copied aside (not moved)
        # before the new one replaces it, so a kill between the two steps loses nothing.
        # ``events_bytes``: how much of events.jsonl this checkpoint covers; a resume cuts
        # the file back to it (``rewind_events``), since it repeats everything after it.
        # evo run holds each kernel's rows until that kernel's next checkpoint and appends
        # them just before it (``evo.driver``: with kernels searched at once, one kernel's
        # checkpoint must not cover another's rows of an unfinished generation), so the file
        # is live a generation at a time; a kill between the rows and the checkpoint still
        # leaves rows no checkpoint covers, and only the resume side can repair that.
        current = self.path / CHECKPOINT
        if current.exists():
            write_atomic(self.path / PREVIOUS, current.read_bytes())
        # No indent: json's C encoder then writes it, ~5x faster than its indenting Python
        # one; every kernel's save writes the whole run's checkpoint, ~1 MB for a model.
        # ``encoded``: kernels' entries as JSON text already (``evo.checkpoint.dumps``).
        write_atomic(current, checkpoint_text({**data, EVENTS_BYTES: self.events_size()},
                                              encoded))

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
    def write_best(self, kernel: str, ptx: str, genome_json: dict,
                   launch_json: dict | None = None) -> None:
        """best/<kernel>.ptx, .genome.json and .launch.json (the grid and block to launch
        the best PTX with: its genome may have changed the spec's)."""
        write_atomic(self.path / "best" / f"{kernel}.ptx", ptx)
        write_atomic(self.path / "best" / f"{kernel}.genome.json",
                     json.dumps(genome_json, indent=1, sort_keys=True) + "\n")
        if launch_json is not None:
            write_atomic(self.path / "best" / f"{kernel}.launch.json",
                         json.dumps(launch_json, indent=1, sort_keys=True) + "\n")

    def read_meta(self) -> dict | None:
        """meta.json, or None where it is missing or unreadable (a run from before it)."""
        try:
            data = json.loads((self.path / META).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write_meta(self, data: dict) -> None:
        write_atomic(self.path / META, json.dumps(data, indent=1, sort_keys=True) + "\n")

    def write_text(self, relative: str, text: str) -> Path:
        path = self.path / relative
        write_atomic(path, text)
        return path
