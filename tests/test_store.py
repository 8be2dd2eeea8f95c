"""The measurement store: persistence, concurrent writers, schema checks, device separation."""

from __future__ import annotations

import multiprocessing
import sqlite3

import pytest

from harness.record import Measurement
from harness.store import SCHEMA_VERSION, STATIC_DEVICE, Store, StoreError, code_hash

GPU = "NVIDIA H200"


def _m(cycles=100.0, timer="clock64", device=GPU, **kw) -> Measurement:
    return Measurement(kernel="k", device=device, valid=True, cycles=cycles, p10=cycles - 1,
                       p90=cycles + 1, n=200, timer=timer, backend="gpu", registers=40,
                       flags=["speedup over 10x: review"], notes={"clock_mhz": 1980}, **kw)


def test_put_lookup_and_reopen_keeps_rows(tmp_path):
    path = tmp_path / "s.sqlite"
    with Store(path) as store:
        assert store.lookup_ptx(GPU, "k", "p1") is None
        store.put(GPU, "k", "p1", "c1", _m(), ptxas_version="13.0.88")
        store.link_ptx(GPU, "k", "p2", "c1")  # another PTX, same code
    with Store(path) as store:
        got = store.lookup_ptx(GPU, "k", "p1")
        assert got is not None and got.cached and got.cycles == 100.0 and got.n == 200
        assert got.flags == ["speedup over 10x: review"] and got.notes == {"clock_mhz": 1980}
        assert store.lookup_ptx(GPU, "k", "p2").cycles == 100.0
        assert store.lookup_code(GPU, "k", "c1").registers == 40
        assert store.lookup_code("NVIDIA H100", "k", "c1") is None  # devices never mix
        assert store.lookup_code(GPU, "other", "c1") is None
        stats = store.stats()
        assert stats["rows"] == 1 and stats["ptx_rows"] == 2
        assert stats["ptx_hits"] == 2 and stats["code_hits"] == 1 and stats["code_misses"] == 2
        row = store._db.execute("SELECT ptxas_version, created <= updated FROM measurements").fetchone()
        assert row == ("13.0.88", 1)


def test_put_replaces_figures_and_keeps_created(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        store.put(GPU, "k", "p1", "c1", _m(100.0))
        created = store._db.execute("SELECT created FROM measurements").fetchone()[0]
        store.put(GPU, "k", "p1", "c1", _m(90.0))
        assert store.lookup_code(GPU, "k", "c1").cycles == 90.0
        assert store._db.execute("SELECT created, COUNT(*) FROM measurements").fetchone() == (created, 1)


def test_code_hash_separates_resources():
    assert code_hash("abc", 40, 0) != code_hash("abc", 64, 0)
    assert code_hash("abc", 40, 0) != code_hash("abc", 40, 1024)
    assert code_hash("abc", 40, None) == code_hash("abc", 40, 0)


def test_static_records_live_only_under_static(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        with pytest.raises(StoreError, match="static"):
            store.put(GPU, "k", "p", "c", _m(timer="static"))
        with pytest.raises(StoreError, match="static"):
            store.put(STATIC_DEVICE, "k", "p", "c", _m(timer="clock64", device=STATIC_DEVICE))
        store.put(STATIC_DEVICE, "k", "p", "c", _m(timer="static", device=STATIC_DEVICE))
        assert store.lookup_code(GPU, "k", "c") is None
        assert store.lookup_code(STATIC_DEVICE, "k", "c").is_static
        # Even a row forged under a GPU's name is refused on the way out.
        store._db.execute("UPDATE measurements SET device = ?", (GPU,))
        assert store.lookup_code(GPU, "k", "c") is None


def _writer(path: str, tag: str, rows: int) -> None:
    store = Store(path)
    for i in range(rows):
        m = Measurement(kernel="k", device=GPU, valid=True, cycles=float(i), timer="clock64")
        store.put(GPU, "k", f"{tag}-ptx-{i}", f"{tag}-code-{i}", m)
    store.close()


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path = str(tmp_path / "s.sqlite")
    Store(path).close()  # schema first, so both writers start on equal terms
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, tag, 200)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with Store(path) as store:
        assert store.stats()["rows"] == 400 and store.stats()["ptx_rows"] == 400
        assert store.lookup_ptx(GPU, "k", "a-ptx-199").cycles == 199.0
        assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_newer_schema_is_a_clear_error(tmp_path):
    path = tmp_path / "s.sqlite"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE schema_info SET value = ? WHERE key = 'version'", (str(SCHEMA_VERSION + 1),))
    db.commit()
    db.close()
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}.*upgrade evo"):
        Store(path)


def test_not_a_database_is_a_clear_error(tmp_path):
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot open measurement store"):
        Store(path)


def test_method_catalogue_counts_and_ranks(tmp_path):
    from harness.store import Store

    with Store(tmp_path / "s.sqlite") as store:
        store.record_method("vectorize loads", "k1", True, 0.3)
        store.record_method("vectorize loads", "k2", False)
        store.record_method("unroll", "k1", True, 0.1)
        store.record_method("unroll", "k1", True, 0.2)
        store.record_method("hoist", "k1", False)
    with Store(tmp_path / "s.sqlite") as store:  # reopened: the catalogue persists
        top = store.top_methods(2)
    assert [m["label"] for m in top] == ["unroll", "vectorize loads"]
    assert top[0]["attempts"] == 2 and top[0]["successes"] == 2
    assert abs(top[0]["mean_gain"] - 0.15) < 1e-9
    assert top[1]["kernels"] == ["k1", "k2"] and top[1]["attempts"] == 2


def test_merge_copies_rows_and_keeps_existing_ones(tmp_path):
    from harness.record import Measurement
    from harness.store import Store, StoreError

    def m(cycles):
        return Measurement(kernel="k", device="GPU", valid=True, cycles=cycles, timer="clock64", n=3)

    with Store(tmp_path / "a.sqlite") as a:
        a.put("GPU", "k", "p1", "c1", m(100.0))
    with Store(tmp_path / "b.sqlite") as b:
        b.put("GPU", "k", "p1", "c1", m(999.0))  # same key: the destination's row wins
        b.put("GPU", "k", "p2", "c2", m(200.0))
    with Store(tmp_path / "a.sqlite") as a:
        assert a.merge_from(tmp_path / "b.sqlite") == {"measurements": 1, "ptx_index": 1}
        assert a.lookup_code("GPU", "k", "c1").cycles == 100.0
        assert a.lookup_ptx("GPU", "k", "p2").cycles == 200.0
        with pytest.raises(StoreError, match="no such"):
            a.merge_from(tmp_path / "missing.sqlite")
        (tmp_path / "notes.txt").write_text("not a database")
        with pytest.raises(StoreError, match="not an evo measurement store"):
            a.merge_from(tmp_path / "notes.txt")
