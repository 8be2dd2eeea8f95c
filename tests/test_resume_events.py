"""A run interrupted in the middle of a generation (SIGINT, SIGTERM, SIGKILL), then resumed,
leaves the events.jsonl an uninterrupted run writes: the same lines in the same order.

Two fields may differ: every row's ``time`` (when it was written), and an eval row's
``cached``. The resumed run repeats the interrupted generation, and the store (shared,
like runs/store.sqlite) already holds what that generation measured before the kill, so
those rows say ``cached: true`` where the uninterrupted run's say false. Nothing else in a
row depends on when it was written.
(Here every interrupted run starts from a copy of the uninterrupted run's store: the same
rows, measured in a fraction of the time.)

The signal is sent by the run to itself, right after a chosen batch of rows is appended
(``DRIVER``), so the kill lands at the same point every time rather than wherever a poll
loop happens to catch the run.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys

import pytest
from conftest import needs_ptxas

from evo.rundir import RunDir

KERNEL = "gemm_tile_2x2x2"
GENERATIONS = 4

# evo.cli with RunDir.append_events wrapped: after appending the first rows of type KIND
# for generation GEN, the process sends itself SIG (as Ctrl-C, `kill`, or `kill -9` would).
DRIVER = """
import os, sys
from evo import cli, rundir
sig, kind, gen = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
append = rundir.RunDir.append_events
def append_then_signal(self, events):
    append(self, events)
    if any(e["type"] == kind and e.get("generation") == gen for e in events):
        os.kill(os.getpid(), sig)
rundir.RunDir.append_events = append_then_signal
sys.exit(cli.main(sys.argv[4:]))
"""


def run_args(out, store):
    # --priors none: a prior's event names the store it read (each run here has its own),
    # and which rows events.jsonl holds is what is compared (priors' resume: test_learn_cli)
    return ["run", "--kernel", KERNEL, "--backend", "static", "--generations",
            str(GENERATIONS), "--pop", "4", "--seed", "7", "--store", str(store),
            "--priors", "none", "--out", str(out), "-q"]


def lines(run_dir) -> list[str]:
    return (run_dir / "events.jsonl").read_text().splitlines()


def comparable(line: str) -> dict:
    row = json.loads(line)
    assert row.pop("time")  # every row is stamped; when differs (see the module docstring)
    if row["type"] == "eval":
        row.pop("cached")  # see the module docstring
    return row


def checkpointed_generation(run_dir) -> int | None:
    path = run_dir / "checkpoint.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())["kernels"][KERNEL]["state"]["generation"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("straight")
    subprocess.run([sys.executable, "-m", "evo.cli", *run_args(tmp / "run", tmp / "s.sqlite")],
                   cwd=tmp, check=True, capture_output=True, timeout=600)
    return tmp / "run"


@needs_ptxas
@pytest.mark.parametrize("sig, kind, gen, checkpointed", [
    (signal.SIGINT, "eval", 3, 2),           # generation 3 measured, not yet checkpointed
    (signal.SIGTERM, "eval", 3, 2),
    (signal.SIGKILL, "eval", 3, 2),
    (signal.SIGKILL, "generation", 3, 2),    # its event written, its checkpoint not
    (signal.SIGKILL, "eval", 1, None),       # before the first checkpoint: starts over
], ids=["sigint", "sigterm", "sigkill", "sigkill-before-checkpoint", "sigkill-generation-1"])
def test_resume_after_a_signal_writes_no_row_twice(straight, tmp_path, sig, kind, gen,
                                                   checkpointed):
    run_dir, store = tmp_path / "run", tmp_path / "s.sqlite"
    shutil.copy(straight.parent / "s.sqlite", store)
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(int(sig)), kind, str(gen),
                           *run_args(run_dir, store)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == (-signal.SIGKILL if sig == signal.SIGKILL else 130), proc.stderr
    assert "Traceback" not in proc.stderr
    # killed where meant: the generation's rows are in events.jsonl, its checkpoint is not
    assert checkpointed_generation(run_dir) == checkpointed
    assert any(json.loads(ln)["type"] == kind and json.loads(ln).get("generation") == gen
               for ln in lines(run_dir))
    if sig == signal.SIGKILL:  # and a kill in the middle of a write leaves a torn line
        with open(run_dir / "events.jsonl", "a") as f:
            f.write('{"backend": "static", "cached": fa')

    subprocess.run([sys.executable, "-m", "evo.cli", "run", "--resume", str(run_dir), "-q"],
                   cwd=tmp_path, check=True, capture_output=True, timeout=600)
    got, want = lines(run_dir), lines(straight)
    assert len(got) == len(want)
    assert [comparable(ln) for ln in got] == [comparable(ln) for ln in want]


def test_rewind_never_pads_nor_cuts_inside_a_line(tmp_path):
    run = RunDir.create(tmp_path / "run", "[run]\n")
    run.append_events([{"type": "eval", "n": 1}, {"type": "eval", "n": 2}])
    text = (run.path / "events.jsonl").read_text()
    first = len(text.splitlines()[0]) + 1
    run.rewind_events(None)  # a checkpoint older than events_bytes: left alone
    run.rewind_events(len(text) + 100)  # the file lost its end in a crash: never padded
    run.rewind_events(first + 3)  # not at the end of a line: not the file it covered
    assert (run.path / "events.jsonl").read_text() == text
    run.rewind_events(first)
    assert [e["n"] for e in run.events()] == [1]
    run.write_checkpoint({"kernels": {}})
    assert run.read_checkpoint()["events_bytes"] == first
