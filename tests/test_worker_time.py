"""harness.tools.worker_time on a real SQLite store: per kernel the worker's seconds and
the phases that took them, the slowest measurement, and clear answers for a file that is
not a store or holds nothing."""

from __future__ import annotations

from harness.record import Measurement
from harness.store import Store
from harness.tools import worker_time

GPU = "NVIDIA H200"


def _put(store, kernel: str, code: str, seconds: float, phases: dict) -> None:
    m = Measurement(kernel=kernel, device=GPU, valid=True, cycles=100.0, timer="events",
                    notes={"phases": phases}, seconds=seconds)
    store.put(GPU, kernel, f"ptx-{code}", f"code-{code}", m)


def test_the_baseline_that_held_the_worker_stands_out(tmp_path, capsys):
    path = str(tmp_path / "s.sqlite")
    with Store(path) as store:
        _put(store, "gelu@8M", "base", 6.6, {"check > baseline outputs": 5.4, "timing": 0.3})
        _put(store, "gelu@8M", "v1", 0.1, {"check > baseline outputs": 0.005, "timing": 0.05})
        _put(store, "gemm_tile_4x4x4", "v1", 0.02, {"timing": 0.01})
    times = worker_time.worker_time(path)
    gelu = times["gelu@8M"]
    assert gelu["n"] == 2 and abs(gelu["seconds"] - 6.7) < 1e-9 and gelu["slowest"] == 6.6
    assert gelu["phases"].most_common(1)[0] == ("check > baseline outputs", 5.405)
    assert worker_time.main([path, "--top", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("| gelu@8M | 2 | 6.70 | 3350.0 | 6.60 | check > baseline outputs 5.41 |")
    assert out[3].startswith("| gemm_tile_4x4x4 | 1 | 0.02 |")
    assert out[-1] == "3 measurements, 6.7 s of the worker"
    assert worker_time.worker_time(path, ["gemm_tile_4x4x4"]).keys() == {"gemm_tile_4x4x4"}


def test_not_a_store_and_an_empty_one_say_so(tmp_path, capsys):
    bad = tmp_path / "x.sqlite"
    bad.write_text("not sqlite")
    assert worker_time.main([str(bad)]) == 2
    assert "not a measurement store" in capsys.readouterr().out
    with Store(str(tmp_path / "e.sqlite")):
        pass
    assert worker_time.main([str(tmp_path / "e.sqlite")]) == 1
    assert "no measurements" in capsys.readouterr().out


def test_busy_bins_spread_each_measurement_over_the_seconds_it_covers():
    # (end, seconds): 0-4 s on one worker, 3-8 s on another, 12-13 s; two GPUs, 5 s bins
    bins = worker_time.busy_bins([(4.0, 4.0), (8.0, 5.0), (13.0, 1.0)], gpus=2)
    assert bins == [(4 + 2) / 10, 3 / 10, 1 / 10]
    assert worker_time.busy_bins([], gpus=1) == []


def test_the_whole_store_by_phase(tmp_path, capsys):
    path = str(tmp_path / "s.sqlite")
    with Store(path) as store:
        _put(store, "gelu@8M", "base", 0.5, {"check > inputs drawn": 0.4, "timing": 0.1})
        _put(store, "relu@4M", "v1", 0.25, {"check > inputs drawn": 0.1, "timing": 0.15})
    assert worker_time.main([path, "--whole", "--gpus", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("2 measurements, 0.8 s of the worker, window ") and out[0].endswith(" on 2 GPU(s)")
    assert out[4:6] == ["| check > inputs drawn | 0.50 |", "| timing | 0.25 |"]
    assert out[-1].startswith("workers busy per 5 s: ")
