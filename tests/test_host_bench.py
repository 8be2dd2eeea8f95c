"""evo.host_bench: a command's wall time and its main process's CPU, with GPU workers that
answer at once where there is no GPU (in a subprocess: it replaces the GPU worker)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_model_run_through_instant_gpu_workers_says_what_it_cost(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "evo.host_bench", "--fake-gpu", "--profile", str(tmp_path / "p"),
         "--", "run", "--model", str(ROOT / "tests/data/capture/decoder"), "--generations", "1",
         "--pop", "3", "--out", str(tmp_path / "run"), "--store", str(tmp_path / "s.sqlite"), "-q",
         "--gpus", "0,1"],  # two instant workers: finalist checks borrow one of them
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("host_bench: exit 0, wall ") and "nothing measured" in line
    report = (tmp_path / "run" / "report.md").read_text()
    assert "instant worker (no GPU)" in report and "Finalist check" in report
    import pstats

    stats = pstats.Stats(str(tmp_path / "p"))  # the searches' threads profiled too
    assert any(func[2] == "search_kernel" for func in stats.stats)


def test_it_asks_for_a_command():
    done = subprocess.run([sys.executable, "-m", "evo.host_bench"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and "give evo's arguments after --" in done.stderr


def test_a_thread_whose_profiler_is_refused_still_runs(monkeypatch):
    """Python 3.12+ allows one profiler a process (the main thread's sees every thread):
    a thread's own is refused with ValueError, and the thread must run anyway (it died,
    and a GPU run hung until its timeout)."""
    import threading

    from evo import host_bench

    class Refused:
        def enable(self):
            raise ValueError("Another profiling tool is already active")

    monkeypatch.setattr(host_bench.cProfile, "Profile", Refused)
    monkeypatch.setattr(threading.Thread, "run", threading.Thread.run)  # restored after
    profiles, ran = [], []
    host_bench._profile_threads(profiles)
    thread = threading.Thread(target=lambda: ran.append(True))
    thread.start()
    thread.join(10)
    assert ran == [True] and profiles == []
