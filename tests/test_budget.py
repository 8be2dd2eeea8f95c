"""evo.model.budget: a model's evaluations split by the kernels' share of the step, and
`evo run --model DIR --budget-evals N` spending them (static backend, the committed capture)."""

from __future__ import annotations

import json
from pathlib import Path

from evo.model import budget

from conftest import capture_with_one_code, needs_ptxas

DECODER = Path(__file__).parent / "data" / "capture" / "decoder"


def test_evaluations_follow_the_shares_with_one_population_each_at_least():
    got = budget.split_evals(100, ["a", "b", "c"], {"a": 0.6, "b": 0.3, "c": 0.1}, floor=5)
    assert got == {"a": 56, "b": 31, "c": 13} and sum(got.values()) == 100  # 85 spare: 51, 25.5, 8.5


def test_largest_remainders_keep_the_total_and_unknown_kernels_weigh_as_the_mean():
    got = budget.split_evals(20, ["a", "b", "x"], {"a": 0.5, "b": 0.1}, floor=2)
    assert sum(got.values()) == 20 and got["a"] > got["x"] > got["b"]
    assert budget.split_evals(9, ["p", "q", "r"], {}, floor=3) == {"p": 3, "q": 3, "r": 3}
    assert budget.split_evals(4, ["p", "q", "r"], {}, floor=3) == {"p": 3, "q": 3, "r": 3}  # floor wins


def test_shares_come_from_capture_folders_only(tmp_path):
    manifest = json.loads((DECODER / "manifest.json").read_text())
    got = budget.shares([str(DECODER), "relu", str(tmp_path)])
    assert got == {k["name"]: k["share"] for k in manifest["kernels"]}


def test_a_code_run_at_two_sizes_weighs_by_both_shares(tmp_path):
    """Evolved once for both sizes (one launcher), so its budget is for both."""
    cap = tmp_path / "cap"
    _, one, other = capture_with_one_code(cap, 1, 2)
    got = budget.shares([str(cap)])
    assert other["name"] not in got
    assert abs(got[one["name"]] - (one["share"] + other["share"])) < 1e-12


@needs_ptxas
def test_evo_run_spends_a_model_budget_by_share(tmp_path, capsys):
    from evo.cli import main

    code = main(["run", "--model", str(DECODER), "--backend", "static", "--generations", "50",
                 "--pop", "4", "--budget-evals", "40", "--out", str(tmp_path / "run"),
                 "--store", str(tmp_path / "s.sqlite"), "-q"])
    assert code == 0, capsys.readouterr()
    checkpoint = json.loads((tmp_path / "run" / "checkpoint.json").read_text())
    manifest = json.loads((DECODER / "manifest.json").read_text())
    shares = {k["name"]: k["share"] for k in manifest["kernels"]}
    want = budget.split_evals(40, list(shares), shares, 4)
    evals = {name: k["evals"] for name, k in checkpoint["kernels"].items()}
    assert all(evals[n] <= want[n] for n in want), (evals, want)
    assert sum(evals.values()) > 20  # the budget was spent, not the 50 generations


@needs_ptxas
def test_a_time_budget_ends_each_search_after_its_first_generation_and_a_resume_goes_on(
        tmp_path, capsys):
    """--budget-minutes: past it each search ends after its current generation (the first
    is always measured: a baseline and the first genomes), says so, and records it in an
    event; a resume with no time budget (or more minutes) goes on to --generations."""
    from evo.cli import main

    run = tmp_path / "run"
    args = ["run", "--kernel", "gemm_tile_2x2x2", "--kernel", "gemm_tile_2x2x4", "--backend",
            "static", "--generations", "4", "--pop", "4", "--store", str(tmp_path / "s.sqlite"),
            "--out", str(run), "--budget-minutes", "0.00001"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert err.count("--budget-minutes 1e-05 ran out: its search ended after generation 1") == 2, err
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    stopped = [e for e in events if e["type"] == "out of time"]
    assert sorted(e["kernel"] for e in stopped) == ["gemm_tile_2x2x2", "gemm_tile_2x2x4"]
    assert all(e["generation"] == 1 and e["evals"] > 0 for e in stopped)
    assert main(["run", "--resume", str(run), "--budget-minutes", "0", "-q"]) == 0
    saved = json.loads((run / "checkpoint.json").read_text())["kernels"]
    assert all(k["state"]["generation"] == 4 for k in saved.values()), saved


def test_a_time_budget_is_checked_like_every_key():
    import pytest

    from evo import config as cfg
    from genomes.errors import EvoError

    with pytest.raises(EvoError, match=r"\[run\] budget_minutes must be"):
        cfg.from_dict({"run": {"budget_minutes": -1}})
