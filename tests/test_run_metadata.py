"""Run metadata: meta.json (what ran, where, when; resumes), a ``time`` on every row of
events.jsonl, and the ``latest`` link beside the newest run. Static backend, real ptxas,
`evo run` in a subprocess as a user runs it."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import ROOT, needs_ptxas
from evo import runmeta
from evo.rundir import RunDir

KERNEL = "gemm_tile_2x2x2"
# --priors none: a cold start is the quickest (what is checked here does not depend on it)
RUN = ["run", "--kernel", KERNEL, "--backend", "static", "--generations", "1", "--pop", "2",
       "--seed", "3", "--store", "s.sqlite", "--priors", "none", "-q"]


def evo(*args, cwd) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "evo.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def utc(text: str) -> dt.datetime:
    """An ISO 8601 UTC time as evo writes it (``...Z``); anything else fails."""
    assert text.endswith("Z"), text
    when = dt.datetime.fromisoformat(text)
    assert when.utcoffset() == dt.timedelta(0), text
    return when


def meta(run_dir) -> dict:
    return json.loads((run_dir / "meta.json").read_text())


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """A one-generation run in the default runs/ folder, then resumed to two: the folder,
    and meta.json as the first run left it."""
    tmp = tmp_path_factory.mktemp("meta")
    evo(*RUN, cwd=tmp)
    (run_dir,) = [p for p in (tmp / "runs").iterdir() if p.name != "latest"]
    first = meta(run_dir)
    evo("run", "--resume", run_dir, "--generations", "2", "-q", cwd=tmp)
    return run_dir, first


@needs_ptxas
def test_meta_json_says_what_ran(resumed):
    from harness.toolchain import ptxas_version

    import evo as evo_pkg

    run_dir, first = resumed
    assert first["evo_version"] == evo_pkg.__version__
    assert first["python_version"] == platform.python_version()
    assert first["ptxas_version"] == ptxas_version()
    try:
        import cupy
    except ImportError:
        cupy = None  # the assert below, not an except, decides: it cannot be swallowed
    assert first["cupy_version"] == (cupy.__version__ if cupy is not None else None)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip() if shutil.which("git") else None
    assert first["evo_git_commit"] == (head or None)
    changed = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                             capture_output=True, text=True).stdout.strip() if head else None
    assert first["evo_git_modified"] == (bool(changed) if head else None)
    # static: no GPU, so no driver and no devices
    assert first["nvidia_driver"] is None and first["devices"] is None
    assert first["backend"].startswith("static")
    assert first["argv"] == ["evo", *RUN]
    assert first["status"] == "finished" and first["resumes"] == []
    assert utc(first["start"]) <= utc(first["end"])


@needs_ptxas
def test_resume_keeps_the_start_and_adds_an_entry(resumed):
    run_dir, first = resumed
    now = meta(run_dir)
    assert now["start"] == first["start"] and now["argv"] == first["argv"]
    (entry,) = now["resumes"]
    assert entry["argv"] == ["evo", "run", "--resume", str(run_dir), "--generations", "2",
                             "-q"]
    assert utc(first["end"]) <= utc(entry["start"]) <= utc(entry["end"])
    assert now["end"] == entry["end"] and now["status"] == "finished"


@needs_ptxas
def test_every_event_has_its_time(resumed):
    run_dir, first = resumed
    rows = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]
    times = [utc(row["time"]) for row in rows]
    assert times == sorted(times)
    assert utc(first["start"]) <= times[0] and times[-1] <= utc(meta(run_dir)["end"])
    assert {row["generation"] for row in rows if row["type"] == "generation"} == {1, 2}


@needs_ptxas
def test_latest_links_the_newest_run(resumed, tmp_path):
    run_dir, _ = resumed
    latest = run_dir.parent / "latest"
    assert latest.is_symlink() and os.readlink(latest) == run_dir.name  # relative
    assert (latest / "meta.json").is_file()
    # --out: beside that run folder; a second run moves the link
    evo(*RUN, "--out", "mine/a", cwd=tmp_path)
    assert os.readlink(tmp_path / "mine" / "latest") == "a"
    evo(*RUN, "--out", "mine/b", cwd=tmp_path)
    assert os.readlink(tmp_path / "mine" / "latest") == "b"
    assert sorted(os.listdir(tmp_path / "mine")) == ["a", "b", "latest"]  # no temp link left


def test_link_latest_leaves_a_real_file_alone_and_skips_when_symlinks_fail(tmp_path,
                                                                           monkeypatch):
    (tmp_path / "latest").write_text("mine")
    run = RunDir.create(tmp_path / "r1", "[run]\n")
    run.link_latest()
    assert (tmp_path / "latest").read_text() == "mine"
    (tmp_path / "latest").unlink()

    def no_symlinks(*args, **kw):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "symlink", no_symlinks)
    run.link_latest()  # silently nothing
    assert sorted(os.listdir(tmp_path)) == ["r1"]


def test_a_discarded_run_takes_its_meta_and_link_along(tmp_path):
    (tmp_path / "mine").mkdir()
    run = RunDir.create(tmp_path / "mine", "[run]\n")  # a folder that was there already
    runmeta.begin(run, ["evo", "run"], resumed=False)
    run.link_latest()
    assert run.discard()
    assert os.listdir(tmp_path / "mine") == [] and not (tmp_path / "latest").is_symlink()


def test_interrupted_run_records_its_end(tmp_path, monkeypatch, capsys):
    from evo import run as run_mod
    from evo.cli import main

    def interrupted(rundir, config, checkpoint, verbosity):
        rundir.append_events([{"type": "eval"}])
        raise KeyboardInterrupt

    monkeypatch.setattr(run_mod, "execute", interrupted)
    args = ["run", "--kernel", KERNEL, "--backend", "static", "--out", str(tmp_path / "r"),
            "--store", str(tmp_path / "s.sqlite"), "-q"]
    assert main(args) == 130
    data = meta(tmp_path / "r")
    assert data["status"] == "interrupted" and utc(data["start"]) <= utc(data["end"])
    assert data["argv"] == ["evo", *args]


def test_gpu_backend_records_driver_and_devices(tmp_path, monkeypatch):
    run = RunDir.create(tmp_path / "r", "[run]\n")
    runmeta.begin(run, ["evo", "run"], resumed=False)
    monkeypatch.setattr(runmeta, "nvidia_driver", lambda: "550.54.15")
    gpu = SimpleNamespace(name="gpu", device="NVIDIA H200", gpus=[0, 1],
                          describe=lambda: "gpu on NVIDIA H200")
    runmeta.record_backend(run, gpu)
    data = meta(run.path)
    assert data["nvidia_driver"] == "550.54.15" and data["backend"] == "gpu on NVIDIA H200"
    assert data["devices"] == [{"id": 0, "name": "NVIDIA H200"},
                               {"id": 1, "name": "NVIDIA H200"}]


def test_git_commit_is_null_outside_a_checkout_of_evo(tmp_path):
    assert runmeta.git_commit(tmp_path) is None
    assert runmeta.git_modified(tmp_path) is None


@pytest.mark.skipif(shutil.which("git") is None, reason="no git here")
def test_a_checkout_with_changed_tracked_files_is_said_modified(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
    (tmp_path / "new.py").write_text("")  # untracked: no commit's code changed
    assert runmeta.git_commit(tmp_path) and runmeta.git_modified(tmp_path) is False
    (tmp_path / "a.py").write_text("x = 2\n")
    assert runmeta.git_modified(tmp_path) is True


def test_event_rows_get_a_time_and_callers_dicts_stay_as_they_were(tmp_path):
    run = RunDir.create(tmp_path / "r", "[run]\n")
    event = {"type": "eval", "n": 1}
    run.append_events([event])
    assert event == {"type": "eval", "n": 1}
    (row,) = run.events()
    assert row["n"] == 1 and utc(row["time"])


def test_resuming_a_run_from_before_meta_json(tmp_path):
    run = RunDir.create(tmp_path / "r", "[run]\n")  # as an older evo left it: no meta.json
    runmeta.begin(run, ["evo", "run", "--resume", "r"], resumed=True)
    runmeta.finish(run, "finished")
    data = meta(run.path)
    assert data["start"] is None and data["argv"] is None  # not known, not made up
    (entry,) = data["resumes"]
    assert entry["argv"] == ["evo", "run", "--resume", "r"] and entry["end"] == data["end"]
