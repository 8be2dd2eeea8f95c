"""`evo run` end to end on the static backend: run folder, resume, SIGKILL, show, plot."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import needs_ptxas

KERNEL = "gemm_tile_2x4x4"


def evo(*args, cwd, check=True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "evo.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600, **kw)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def run_args(out, store, generations):
    return ["run", "--kernel", KERNEL, "--backend", "static", "--generations", str(generations),
            "--pop", "4", "--seed", "7", "--store", str(store), "--out", str(out), "-q"]


def final_state(run_dir) -> dict:
    data = json.loads((run_dir / "checkpoint.json").read_text())
    kernel = data["kernels"][KERNEL]
    return {"state": kernel["state"], "evals": kernel["evals"], "rng": kernel["rng"],
            "best": json.loads((run_dir / "best" / f"{KERNEL}.genome.json").read_text())}


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("straight")
    evo(*run_args(tmp / "run", tmp / "store.sqlite", 4), cwd=tmp)
    return tmp / "run"


@needs_ptxas
def test_run_writes_everything_labelled_static(straight):
    for name in ("config.toml", "events.jsonl", "checkpoint.json", "report.md",
                 f"best/{KERNEL}.ptx", f"best/{KERNEL}.genome.json"):
        assert (straight / name).is_file(), name
    report = (straight / "report.md").read_text()
    assert "static estimate, not measured" in report
    assert re.search(r"This invocation took [\d.]+ s; evo's own process was busy [\d.]+ s", report)
    events = [json.loads(ln) for ln in (straight / "events.jsonl").read_text().splitlines()]
    gens = [e for e in events if e["type"] == "generation"]
    assert [g["generation"] for g in gens] == [1, 2, 3, 4]
    assert all(e["timer"] == "static" for e in events if e["type"] == "eval")
    bests = [g["best"] for g in gens]
    assert all(b <= a for a, b in zip(bests, bests[1:])), "elitism: best never gets worse"


@needs_ptxas
def test_two_plus_resume_two_equals_four(straight, tmp_path):
    store = tmp_path / "store.sqlite"
    evo(*run_args(tmp_path / "run", store, 2), cwd=tmp_path)
    evo("run", "--resume", str(tmp_path / "run"), "--generations", "4", "-q", cwd=tmp_path)
    assert final_state(tmp_path / "run") == final_state(straight)


@needs_ptxas
def test_sigkill_in_generation_three_then_resume(straight, tmp_path):
    store = tmp_path / "store.sqlite"
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "evo.cli", *run_args(run_dir, store, 4)],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    try:
        while time.time() < deadline:  # kill once generation 2 is checkpointed
            # (the checkpoint itself: a generation's event now comes just before it)
            ckpt = run_dir / "checkpoint.json"
            # (the priors are saved before any generation: no kernel entry yet then)
            entry = json.loads(ckpt.read_text())["kernels"].get(KERNEL) if ckpt.exists() else None
            if entry and entry["state"]["generation"] >= 2:
                break
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    saved = json.loads((run_dir / "checkpoint.json").read_text())
    assert saved["kernels"][KERNEL]["state"]["generation"] in (2, 3)
    evo("run", "--resume", str(run_dir), "-q", cwd=tmp_path)
    assert final_state(run_dir) == final_state(straight)


@needs_ptxas
def test_show_and_plot(straight, tmp_path):
    out = evo("show", str(straight), cwd=tmp_path).stdout
    assert KERNEL in out and "static estimate, not measured" in out
    evo("plot", str(straight), cwd=tmp_path)
    png = straight / "plots" / f"{KERNEL}.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (straight / "plots" / "summary.png").stat().st_size > 1000
    for name in (KERNEL, "summary"):  # an SVG beside each PNG
        assert b"<svg" in (straight / "plots" / f"{name}.svg").read_bytes()[:400]


@pytest.mark.parametrize("args,needle", [
    (["run", "--resume", "no/such/run"], "no such run folder"),
    (["run", "--kernel", "gemm_tile_3x3x3", "--backend", "static"], "unknown kernel"),
    (["run", "--config", "bad.toml"], "unknown key 'generatons' in [run]"),
])
def test_bad_input_is_one_line(tmp_path, args, needle):
    (tmp_path / "bad.toml").write_text("[run]\ngeneratons = 3\n")
    proc = evo(*args, cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_corrupted_checkpoint_names_the_file_and_offers_previous(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.toml").write_text("[run]\nstrategy = \"evolve\"\n")
    (run_dir / "checkpoint.json").write_text("{torn")
    (run_dir / "checkpoint.prev.json").write_text("{}")
    proc = evo("run", "--resume", str(run_dir), cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert "corrupted checkpoint" in proc.stderr and "checkpoint.json" in proc.stderr
    assert "--from-previous" in proc.stderr
