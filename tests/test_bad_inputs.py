"""A table of bad inputs across every command (issue 31, "exit status that tells the
truth"): each one is refused with a non-zero status and one line, never a traceback and
never status 0. Usage errors (2) for what the command line or a file says; runtime
failures (1) for what the tools say (ptxas rejecting text that is not PTX)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.cli import main

DATA = Path(__file__).parent / "data" / "init_kernel"

CASES = [  # (argv, status)
    (["run", "--kernel", "no_such_kernel", "--backend", "static"], 2),
    (["run", "--generations", "-1", "--backend", "static"], 2),
    (["run", "--pop", "0", "--backend", "static"], 2),
    (["run", "--backend", "nope"], 2),
    (["run", "--strategy", "nope"], 2),
    (["run", "--config", "missing.toml"], 2),
    (["run", "--config", "bad.toml"], 2),
    (["run", "--config", "unknown_key.toml"], 2),
    (["run", "--seed", "abc"], 2),
    (["run", "--gpus", "x"], 2),
    (["run", "--jobs", "-1", "--backend", "static"], 2),
    (["run", "--resume", "not_a_run"], 2),
    (["run", "--out", "not_a_run", "--backend", "static", "--kernel", "gemm_tile_2x2x2"], 2),
    (["measure", "no_such_kernel", "--backend", "static"], 2),
    (["measure", "relu", "--genome", "nope_gene", "--backend", "static"], 2),
    (["measure", "relu", "--genome", "vec_ld(width=3)", "--backend", "static"], 2),
    (["compile", "missing.ptx"], 2),
    (["compile", "garbage.ptx"], 1),
    (["apply", "vec_ld", "missing.ptx"], 2),
    (["apply", "{bad json", "relu"], 2),
    (["init-kernel", "missing.ptx"], 2),
    (["init-kernel", "two.ptx"], 2),
    (["init-kernel", "two.ptx", "--entry", "nope"], 2),
    (["show", "not_a_run"], 2),
    (["diff", "not_a_run", "relu"], 2),
    (["export", "not_a_run", "relu"], 2),
    (["plot", "not_a_run"], 2),
    (["bench", "--suite", "nope", "--out", "b1", "--backend", "static"], 2),
    (["bench", "--strategies", "nope", "--out", "b2", "--backend", "static"], 2),
    (["capture", "--out", "c1"], 2),
    (["capture", "--out", "c2", "--", "python", "missing.py"], 2),
    (["verify", "--model", "c3", "--run", "not_a_run", "--", "python", "missing.py"], 2),
    (["stability", "relu", "--workers", "0"], 2),
    (["prompt", "no_such_kernel"], 2),
    (["priors", "show", "missing.json"], 2),
    (["store", "stats", "--store", "missing_dir/x.sqlite"], 2),
    (["transforms", "--bogus"], 2),
]


@pytest.fixture
def bad_files(tmp_path, monkeypatch):
    (tmp_path / "bad.toml").write_text("[run\nx = 1\n")
    (tmp_path / "unknown_key.toml").write_text("[run]\ngeneratoins = 3\n")
    (tmp_path / "garbage.ptx").write_text("this is not ptx\n")
    (tmp_path / "two.ptx").write_text((DATA / "hist.ptx").read_text())
    (tmp_path / "not_a_run").mkdir()
    (tmp_path / "not_a_run" / "notes.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("argv, status", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_a_bad_input_is_refused_with_its_status(argv, status, bad_files, capsys):
    try:
        code = main(argv)
    except SystemExit as done:  # argparse's own refusals
        code = done.code
    out, err = capsys.readouterr()
    assert code == status, (code, out, err)
    assert "Traceback" not in out + err
    if status == 2:
        assert err.strip().splitlines()[-1].startswith(("evo: error:", "usage:", "evo ")), err
    assert (bad_files / "not_a_run" / "notes.txt").read_text() == "mine"  # nothing written into it


def test_the_table_is_large_enough_to_mean_something():
    assert len(CASES) >= 30
