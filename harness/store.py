"""The measurement store: SQLite, shared across runs, so nothing is measured twice.

Two tables answer the two cheap questions the evaluation pipeline asks before any GPU work:

* ``measurements``, one row per (device, kernel, code_hash): a :class:`Measurement`'s
  fields. ``code_hash`` identifies the machine code *and* its resources (see
  :func:`code_hash`), because two cubins with identical instructions but a different
  register count or shared-memory size can run at different speeds.
* ``ptx_index``, (device, kernel, ptx_hash) -> code_hash, so that an identical PTX text is
  never even compiled again.

A third table, ``methods``, is the catalogue of LLM edit methods (label, kernels tried,
attempts, successes, summed gain), shared across runs like the measurements.
A fourth, ``genomes``, (device, kernel, genome) -> ptx_hash, says which genome (inline
text, ``""`` for the baseline) gave which PTX, so that what each gene did on each kernel
can be read back (``evo.learn`` builds its priors from it; searches write it).

Rows are keyed by device and never mix: the same cubin reads ~3 % apart on two machines
of one model (DESIGN.md), and static cost estimates live under the device name
``"static"`` so that no lookup for a GPU can return one. Several processes may read and
write one store at once: WAL mode lets readers run beside a writer, ``busy_timeout`` makes
a writer wait for the lock instead of failing, and every write is one short transaction.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path

from genomes.errors import EvoError, RuntimeFailure
from harness.record import Measurement

#: Bump when the tables change; an older evo refuses a newer store rather than guess.
SCHEMA_VERSION = 1
#: The device name static-backend records are stored under (never a GPU's name).
STATIC_DEVICE = "static"
#: How long a writer waits for another process's transaction before giving up.
BUSY_TIMEOUT_MS = 60_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS measurements (
    device TEXT NOT NULL, kernel TEXT NOT NULL, code_hash TEXT NOT NULL,
    valid INTEGER NOT NULL, reason TEXT NOT NULL,
    cycles REAL, p10 REAL, p90 REAL, n INTEGER NOT NULL DEFAULT 0,
    timer TEXT NOT NULL DEFAULT '', backend TEXT NOT NULL DEFAULT '',
    registers INTEGER, spill_stores INTEGER, spill_loads INTEGER, shared_mem INTEGER,
    ptx_hash TEXT NOT NULL DEFAULT '', sass_hash TEXT NOT NULL DEFAULT '',
    flags TEXT NOT NULL DEFAULT '[]', notes TEXT NOT NULL DEFAULT '{}',
    seconds REAL NOT NULL DEFAULT 0, ptxas_version TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL, updated REAL NOT NULL,
    PRIMARY KEY (device, kernel, code_hash)
);
CREATE TABLE IF NOT EXISTS ptx_index (
    device TEXT NOT NULL, kernel TEXT NOT NULL, ptx_hash TEXT NOT NULL,
    code_hash TEXT NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (device, kernel, ptx_hash)
);
CREATE TABLE IF NOT EXISTS methods (
    label TEXT PRIMARY KEY, kernels TEXT NOT NULL DEFAULT '[]',
    attempts INTEGER NOT NULL DEFAULT 0, successes INTEGER NOT NULL DEFAULT 0,
    gain_sum REAL NOT NULL DEFAULT 0, updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS genomes (
    device TEXT NOT NULL, kernel TEXT NOT NULL, genome TEXT NOT NULL,
    ptx_hash TEXT NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (device, kernel, genome)
);
"""

# Measurement fields kept as plain columns; flags and notes go in as JSON.
_COLUMNS = ("valid", "reason", "cycles", "p10", "p90", "n", "timer", "backend", "registers",
            "spill_stores", "spill_loads", "shared_mem", "ptx_hash", "sass_hash", "seconds")


class StoreError(EvoError):
    """A store that cannot be used (newer schema, not a SQLite file, unwritable path)."""


class StoreFailure(StoreError, RuntimeFailure):
    """A store the machine cannot use (damaged, unreadable, unwritable, too new), as opposed
    to a wrong path named by the user: the CLI exits with its runtime-failure status."""


def damaged(path: str | Path, problem: str) -> str:
    """The one line that reports a damaged store file and the way out."""
    problem = " ".join(problem.replace("*** in database main ***", "").split())
    return (f"measurement store {path} is damaged ({problem}): `evo store repair {path}` "
            f"copies its readable rows into a fresh store and keeps the damaged file aside "
            f"(or pass another --store)")


def code_hash(text_hash: str, registers: int | None, shared_mem: int | None) -> str:
    """The store key of a compiled variant: its machine code plus the resources it claims.

    ``text_hash`` is :func:`harness.sass.cubin_text_hash`; registers and static shared
    memory come from ptxas's report. They are part of the key because occupancy (and so
    speed) depends on them even when the instructions are identical.
    """
    return f"{text_hash}-r{registers if registers is not None else 'x'}-s{shared_mem or 0}"


def ptxas_error_key(ptx_hash: str) -> str:
    """The code_hash under which a PTX that ptxas rejected is stored (it has no code)."""
    return f"ptxas-error-{ptx_hash}"


def static_reject_key(ptx_hash: str) -> str:
    """The code_hash under which a PTX the static gate rejected is stored (never assembled)."""
    return f"rejected-{ptx_hash}"


class Store:
    """One SQLite store file; safe to share between threads and between processes."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if str(path) != ":memory:":
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise StoreFailure(f"cannot create the folder for measurement store {path}: {err}") from None
        self._lock = threading.Lock()  # one connection, used from the compile/measure threads
        self.counts: Counter = Counter()  # hits/misses of this process, for dedup rates
        try:
            self._db = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000,
                                       check_same_thread=False, isolation_level=None)
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._retry(lambda: self._db.execute("PRAGMA journal_mode = WAL"))
            # NORMAL is durable across a process crash in WAL mode; FULL would fsync every row.
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._check_sound()
            self._retry(self._init_schema)
        except sqlite3.DatabaseError as err:
            raise StoreFailure(f"cannot open measurement store {path}: {err}") from None

    def _check_sound(self) -> None:
        """Refuse a damaged store at once (a malformed page would otherwise fail some lookup
        in the middle of a run), and say how to get out: ``evo store repair``."""
        if str(self.path) == ":memory:":
            return
        try:
            rows = self._retry(lambda: self._db.execute("PRAGMA quick_check(1)").fetchall())
            problem = rows[0][0] if rows and rows[0][0] != "ok" else None
        except sqlite3.OperationalError:
            raise  # locked or unreadable: not damage
        except sqlite3.DatabaseError as err:
            problem = str(err)
        if problem:
            raise StoreFailure(damaged(self.path, problem))

    # ------------------------------------------------------------------ setup
    @staticmethod
    def _retry(fn, attempts: int = 50):
        """Run fn, retrying "database is locked" (journal-mode switches skip busy_timeout)."""
        for i in range(attempts):
            try:
                return fn()
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or i == attempts - 1:
                    raise
                time.sleep(0.05 * (i + 1))

    def _init_schema(self) -> None:
        with self._transaction():
            # One statement at a time: executescript() would commit the open transaction.
            for statement in filter(str.strip, _SCHEMA.split(";")):
                self._db.execute(statement)
            row = self._db.execute("SELECT value FROM schema_info WHERE key = 'version'").fetchone()
            if row is None:
                self._db.execute("INSERT INTO schema_info VALUES ('version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise StoreFailure(f"measurement store {self.path} has schema version {row[0]}; this evo "
                                   f"reads up to version {SCHEMA_VERSION}: upgrade evo or use another --store")

    @contextlib.contextmanager
    def _transaction(self):
        """A write transaction that takes the lock up front (BEGIN IMMEDIATE).

        A deferred transaction that reads first and then writes can fail with "locked"
        without waiting when another process wrote in between; IMMEDIATE waits instead.
        """
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # ------------------------------------------------------------------ reads
    def lookup_ptx(self, device: str, kernel: str, ptx_hash: str) -> Measurement | None:
        """The measurement of the code this exact PTX assembled to, if known for `device`."""
        with self._lock:
            row = self._db.execute(
                "SELECT code_hash FROM ptx_index WHERE device = ? AND kernel = ? AND ptx_hash = ?",
                (device, kernel, ptx_hash)).fetchone()
            found = self._get(device, kernel, row[0]) if row else None
        self.counts["ptx_hits" if found else "ptx_misses"] += 1
        return found

    def lookup_code(self, device: str, kernel: str, code_hash: str) -> Measurement | None:
        """The measurement of this compiled code (see :func:`code_hash`) on `device`."""
        with self._lock:
            found = self._get(device, kernel, code_hash)
        self.counts["code_hits" if found else "code_misses"] += 1
        return found

    def _get(self, device: str, kernel: str, key: str) -> Measurement | None:
        row = self._db.execute(
            f"SELECT {', '.join(_COLUMNS)}, flags, notes FROM measurements "
            "WHERE device = ? AND kernel = ? AND code_hash = ?", (device, kernel, key)).fetchone()
        if row is None:
            return None
        data = dict(zip(_COLUMNS, row[:len(_COLUMNS)]))
        data["valid"] = bool(data["valid"])
        m = Measurement(kernel=kernel, device=device, flags=json.loads(row[-2]),
                        notes=json.loads(row[-1]), cached=True, **data)
        # Belt and braces: a static estimate must never answer a question about a GPU.
        if m.is_static and device != STATIC_DEVICE:
            return None
        return m

    def summary(self) -> list[tuple[str, str, int, int]]:
        """(device, kernel, measurements, valid ones) per device and kernel."""
        with self._lock:
            return self._db.execute(
                "SELECT device, kernel, COUNT(*), SUM(valid) FROM measurements "
                "GROUP BY device, kernel ORDER BY device, kernel").fetchall()

    def devices(self) -> list[str]:
        """Device names with at least one measurement, in name order."""
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT DISTINCT device FROM measurements ORDER BY 1")]

    # ------------------------------------------------------------------ writes
    def put(self, device: str, kernel: str, ptx_hash: str, code_hash: str, measurement: Measurement,
            ptxas_version: str = "") -> None:
        """Record one result: the measurement under its code hash, and the PTX -> code link.

        A later put for the same key replaces the figures but keeps ``created``.
        """
        # A timer-less record (a ptxas error) may go anywhere; a number may not cross over.
        if measurement.is_static != (device == STATIC_DEVICE) and measurement.timer:
            raise StoreError(f"refusing to store a {measurement.timer!r} record under device "
                             f"{device!r}: static estimates live under {STATIC_DEVICE!r} only")
        now = time.time()
        values = [getattr(measurement, c) for c in _COLUMNS]
        values[0] = int(bool(values[0]))
        cols = ("device", "kernel", "code_hash", *_COLUMNS, "flags", "notes", "ptxas_version",
                "created", "updated")
        row = (device, kernel, code_hash, *values, json.dumps(measurement.flags),
               json.dumps(measurement.notes, sort_keys=True, default=str), ptxas_version, now, now)
        update = ", ".join(f"{c} = excluded.{c}" for c in cols[3:] if c != "created")
        with self._lock, self._transaction():
            self._db.execute(
                f"INSERT INTO measurements ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
                f"ON CONFLICT (device, kernel, code_hash) DO UPDATE SET {update}", row)
            if ptx_hash:
                self._db.execute(
                    "INSERT INTO ptx_index VALUES (?, ?, ?, ?, ?) ON CONFLICT (device, kernel, ptx_hash) "
                    "DO UPDATE SET code_hash = excluded.code_hash", (device, kernel, ptx_hash, code_hash, now))

    def link_ptx(self, device: str, kernel: str, ptx_hash: str, code_hash: str) -> None:
        """Remember that this PTX assembles to already-stored code (a code-level hit)."""
        with self._lock, self._transaction():
            self._db.execute("INSERT OR REPLACE INTO ptx_index VALUES (?, ?, ?, ?, ?)",
                             (device, kernel, ptx_hash, code_hash, time.time()))

    def link_genomes(self, device: str, kernel: str, pairs: list[tuple[str, str]]) -> None:
        """Remember which genome (inline text, "" for the baseline) gave which PTX hash."""
        if not pairs:
            return
        now = time.time()
        with self._lock, self._transaction():
            self._db.executemany("INSERT OR REPLACE INTO genomes VALUES (?, ?, ?, ?, ?)",
                                 [(device, kernel, g, h, now) for g, h in pairs])

    def genome_results(self, device: str | None = None) -> list[tuple]:
        """(device, kernel, genome, valid, cycles) of every linked genome whose PTX has a
        stored result (genome -> PTX -> code -> measurement), in a fixed order."""
        where, args = ("WHERE g.device = ?", (device,)) if device is not None else ("", ())
        with self._lock:
            return self._db.execute(
                "SELECT g.device, g.kernel, g.genome, m.valid, m.cycles FROM genomes g "
                "JOIN ptx_index p ON p.device = g.device AND p.kernel = g.kernel "
                "AND p.ptx_hash = g.ptx_hash JOIN measurements m ON m.device = g.device "
                f"AND m.kernel = g.kernel AND m.code_hash = p.code_hash {where} "
                "ORDER BY g.device, g.kernel, g.genome", args).fetchall()

    def forget(self, kernel: str | None = None, reason: str | None = None,
               genome: str | None = None, device: str | None = None) -> dict:
        """Delete the results matching every filter given (at least one of ``kernel`` (a
        name: its store names with a ``#digest`` too, ``KernelSpec.store_name``), ``reason``
        (a prefix of the stored reason, e.g. "ptxas error") and ``genome`` (its inline text;
        "" is the baseline): its code's measurement, which other genomes of the same code
        shared), on ``device`` or all; with them the PTX and genome links that led to a
        deleted result. Returns the counts deleted. Why: a result the store holds
        answers every later run, so one recorded while a tool was broken must be removable."""
        if kernel is None and reason is None and genome is None:
            raise StoreError("forget needs a kernel, a reason or a genome to match")
        where, args = [], []
        if device is not None:
            where.append("m.device = ?")
            args.append(device)
        if kernel is not None:  # with or without the digest of KernelSpec.store_name
            where.append("(m.kernel = ? OR substr(m.kernel, 1, ?) = ?)")
            args += [kernel, len(kernel) + 1, kernel + "#"]
        if reason is not None:
            where.append("substr(m.reason, 1, ?) = ?")
            args += [len(reason), reason]
        if genome is not None:
            where.append("EXISTS (SELECT 1 FROM genomes g JOIN ptx_index p ON p.device = g.device "
                         "AND p.kernel = g.kernel AND p.ptx_hash = g.ptx_hash WHERE g.device = "
                         "m.device AND g.kernel = m.kernel AND p.code_hash = m.code_hash AND "
                         "g.genome = ?)")
            args.append(genome)
        with self._lock, self._transaction():
            doomed = self._db.execute(
                "SELECT m.device, m.kernel, m.code_hash FROM measurements m WHERE "
                + " AND ".join(where), args).fetchall()
            links = genomes = 0
            for d, k, code in doomed:
                ptx = [h for (h,) in self._db.execute(
                    "SELECT ptx_hash FROM ptx_index WHERE device = ? AND kernel = ? AND "
                    "code_hash = ?", (d, k, code))]
                links += self._db.execute("DELETE FROM ptx_index WHERE device = ? AND kernel = ? "
                                          "AND code_hash = ?", (d, k, code)).rowcount
                for h in ptx:
                    genomes += self._db.execute("DELETE FROM genomes WHERE device = ? AND "
                                                "kernel = ? AND ptx_hash = ?", (d, k, h)).rowcount
                self._db.execute("DELETE FROM measurements WHERE device = ? AND kernel = ? AND "
                                 "code_hash = ?", (d, k, code))
        return {"measurements": len(doomed), "ptx_links": links, "genome_links": genomes}

    # ------------------------------------------------------------------ method catalogue
    def record_method(self, label: str, kernel: str, success: bool, gain: float = 0.0) -> None:
        """Count one attempt of an LLM method (``label`` already normalized); ``gain`` is
        the fractional cycle reduction of a successful one."""
        with self._lock, self._transaction():
            row = self._db.execute("SELECT kernels FROM methods WHERE label = ?",
                                   (label,)).fetchone()
            kernels = sorted(set(json.loads(row[0]) if row else []) | {kernel})
            self._db.execute(
                "INSERT INTO methods VALUES (?, ?, 1, ?, ?, ?) ON CONFLICT (label) DO UPDATE SET "
                "kernels = excluded.kernels, attempts = attempts + 1, "
                "successes = successes + excluded.successes, "
                "gain_sum = gain_sum + excluded.gain_sum, updated = excluded.updated",
                (label, json.dumps(kernels), int(success), gain if success else 0.0,
                 time.time()))

    def top_methods(self, n: int = 8) -> list[dict]:
        """The most successful methods: most successes, then best mean gain."""
        with self._lock:
            rows = self._db.execute(
                "SELECT label, kernels, attempts, successes, gain_sum FROM methods "
                "ORDER BY successes DESC, gain_sum DESC, label LIMIT ?", (n,)).fetchall()
        return [{"label": r[0], "kernels": json.loads(r[1]), "attempts": r[2],
                 "successes": r[3], "mean_gain": r[4] / r[3] if r[3] else 0.0} for r in rows]

    # ------------------------------------------------------------------ merging
    def merge_from(self, other: str | Path) -> dict:
        """Copy another store's measurements and PTX links in (rows already here win), so
        stores kept by separate runs or bench strategies can be replayed as one.
        Returns the rows added per table (``genomes`` only where some were)."""
        other = Path(other)
        if not other.is_file():
            raise StoreError(f"no such measurement store: {other}")
        try:  # read-only: merging must not change the source
            src = sqlite3.connect(f"file:{other}?mode=ro", uri=True)
            try:
                version = src.execute("SELECT value FROM schema_info WHERE key = 'version'").fetchone()
            finally:
                src.close()
        except sqlite3.DatabaseError:
            version = None
        if version is None:
            raise StoreError(f"{other} is not an evo measurement store")
        if int(version[0]) > SCHEMA_VERSION:
            raise StoreError(f"{other} has schema version {version[0]}; this evo reads up to "
                             f"{SCHEMA_VERSION}")
        added = {}
        with self._lock:
            self._db.execute("ATTACH DATABASE ? AS other", (str(other),))
            try:
                with self._transaction():
                    tables = ["measurements", "ptx_index"]
                    if self._db.execute("SELECT 1 FROM other.sqlite_master WHERE "
                                        "name = 'genomes'").fetchone():
                        tables.append("genomes")  # stores older than that table lack it
                    for table in tables:
                        before = self._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
                        self._db.execute(f"INSERT OR IGNORE INTO {table} SELECT * FROM other.{table}")
                        after = self._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
                        if table != "genomes" or after > before:  # older callers: two keys
                            added[table] = after - before
            finally:
                self._db.execute("DETACH DATABASE other")
        return added

    # ------------------------------------------------------------------ upkeep
    def stats(self) -> dict:
        """Rows in each table and this process's hits/misses and hit rates per lookup kind."""
        with self._lock:
            out = {"rows": self._db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0],
                   "ptx_rows": self._db.execute("SELECT COUNT(*) FROM ptx_index").fetchone()[0]}
        for kind in ("ptx", "code"):
            hits, misses = self.counts[f"{kind}_hits"], self.counts[f"{kind}_misses"]
            out.update({f"{kind}_hits": hits, f"{kind}_misses": misses,
                        f"{kind}_hit_rate": hits / (hits + misses) if hits + misses else 0.0})
        return out

    def close(self) -> None:
        """Close the connection (later calls fail); safe to call twice."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None  # type: ignore[assignment]

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
