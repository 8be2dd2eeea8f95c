"""evo/plots.py's figures from events: what each panel is computed from (the population by
generation, the best so far, the transforms each generation carried, the speedup to quote),
and that they render with those elements."""

from __future__ import annotations

import json

from evo import plots
from evo.rundir import RunDir


def _eval(gen, cycles, genes=(), valid=True):
    genome = {"genes": [{"transform": t, "params": {}} for t in genes]}
    return {"type": "eval", "kernel": "k", "generation": gen, "genome": genome,
            "valid": valid, "cycles": cycles if valid else None, "timer": "events"}


EVENTS = [_eval(1, 100.0), _eval(1, 90.0, ["vec_ld"]), _eval(1, None, ["maxnreg"], valid=False),
          _eval(2, 95.0, ["vec_ld", "maxnreg"]), _eval(2, 400.0, ["reorder"]),
          _eval(3, 80.0, ["vec_ld", "vec_st"]), _eval(3, 85.0, ["vec_ld"])]


def test_the_best_so_far_never_rises_and_counts_only_valid_variants():
    assert plots._best_so_far_by_generation(EVENTS) == [(1, 90.0), (2, 90.0), (3, 80.0)]


def test_gene_frequencies_are_shares_of_each_generation():
    transforms, gens, share = plots.gene_frequencies(EVENTS)
    assert gens == [1, 2, 3] and transforms[0] == "vec_ld"
    assert share[0] == [1 / 3, 1 / 2, 1.0]  # vec_ld in 1 of 3, 1 of 2, 2 of 2 variants
    assert share[transforms.index("reorder")] == [0.0, 0.5, 0.0]


def test_kernel_plot_renders_png_and_svg(tmp_path):
    series = plots.kernel_series(EVENTS)["k"]
    assert series["baseline"] == 100.0
    path = plots.plot_kernel("k", series, tmp_path / "k.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (tmp_path / "k.svg").read_text()
    # the 400-cycle outlier is past 1.5x the baseline: clipped, and the legend says so
    assert "slower" in svg and "1.5x" in svg and "transforms carried" in svg


def test_the_summary_quotes_the_figures_measured_again(tmp_path):
    run = RunDir.create(tmp_path / "run", '[run]\nstrategy = "evolve"\n')
    run.append_events(EVENTS)
    (run.path / "checkpoint.json").write_text(json.dumps(
        {"kernels": {"k": {"confirmed": {"baseline": 102.0, "best": 68.0}}}}))
    speeds, static, again = plots.best_speedups(run)
    assert speeds == {"k": 1.5} and again == {"k"} and not static
    plots.plot_summary([run], tmp_path / "summary.png")
    svg = (tmp_path / "summary.svg").read_text()
    assert "1.50x" in svg and "measured again" in svg


def test_the_llm_funnel_shows_every_stage_with_its_count(tmp_path):
    from evo.plots import FUNNEL, plot_llm_funnel

    llm = {"calls": 20, "failures": 2, "cached": 4, "proposed": 15, "applied": 12,
           "assembled": 9, "correct": 6, "faster": 2, "repairs": 5}
    path = plot_llm_funnel(llm, tmp_path / "plots" / "llm_funnel.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    svg = path.with_suffix(".svg").read_text()
    for label, _ in FUNNEL:  # matplotlib's SVG names each text in a comment
        assert f"<!-- {label} -->" in svg
    # the bar labels: asked 20 calls + 4 replayed, answered 24 - 2 failed, then the stages
    for count in (24, 22, 15, 12, 9, 6, 2):
        assert f"<!-- {count} -->" in svg
