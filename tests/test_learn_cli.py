"""Priors end to end on the static backend: `evo priors build`, `evo run --priors FILE|auto|
none` (seeds in generation 1, recorded in the run, exact resume), and `evo bench`'s
leave-one-out mode."""

from __future__ import annotations

import json

import pytest

from conftest import needs_ptxas
from genomes.genome import parse_inline
from test_bench import CodeSizeBackend
from test_run_cli import evo

SOURCES = ("gemm_tile_2x2x2", "gemm_tile_2x2x4")
TARGET = "gemm_tile_2x4x2"


def run_args(out, store, generations=2, priors=None, kernel=TARGET):
    args = ["run", "--kernel", kernel, "--backend", "static", "--generations",
            str(generations), "--pop", "4", "--seed", "7", "--store", str(store),
            "--out", str(out), "-q"]
    return args + (["--priors", str(priors)] if priors else [])


def events_of(run_dir) -> list[dict]:
    return [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A static store of two small gemm tiles searched cold, and priors built from it."""
    tmp = tmp_path_factory.mktemp("source")
    args = ["run", "--kernel", SOURCES[0], "--kernel", SOURCES[1], "--backend", "static",
            "--generations", "3", "--pop", "4", "--seed", "7", "--store",
            str(tmp / "store.sqlite"), "--out", str(tmp / "run"), "-q"]
    evo(*args, cwd=tmp)
    out = evo("priors", "build", str(tmp / "store.sqlite"), "-o", str(tmp / "priors.json"),
              cwd=tmp).stdout
    assert "static: 2 kernels" in out
    return tmp


@needs_ptxas
def test_a_users_own_kernels_inform_priors_and_never_their_own(tmp_path):
    """Kernels outside evo's suite (a user's spec; a model's captured kernels) are stored as
    name#digest and have no spec in the suite: a run keeps their features beside the store
    (features.json, under that name), so `evo priors build` and `--priors auto` learn from
    them (they were left out, "0 kernels"); a kernel's own rows, from any spec of its name,
    never count toward its prior; without the kept features the build says what it left
    out."""
    from test_hardening import copy_kernel

    mine = copy_kernel(tmp_path / "mine", "my_tile")
    other = copy_kernel(tmp_path / "mine", "other_tile")
    store = tmp_path / "s.sqlite"

    def run(spec, out):
        evo("run", "--kernel", str(spec), "--backend", "static", "--generations", "2", "--pop",
            "3", "--store", str(store), "--out", str(tmp_path / out), "-q", cwd=tmp_path)
        saved = json.loads((tmp_path / out / "checkpoint.json").read_text())
        return next(iter(saved["priors"].values()))

    run(mine, "first")
    done = evo("priors", "build", str(store), "-o", str(tmp_path / "p.json"), cwd=tmp_path)
    assert "(1 kernels)" in done.stdout and "left out" not in done.stderr
    kb = json.loads((tmp_path / "p.json").read_text())
    assert [e["kernel"].split("#")[0] for e in kb["kernels"]] == ["my_tile"]
    again = run(mine, "again")  # its own earlier rows: not its neighbour
    assert "my_tile" in again["excluded"]
    assert not any(n[0].startswith("my_tile") for n in again["neighbors"]), again["neighbors"]
    theirs = run(other, "other")  # another kernel of the user's: learns from my_tile's rows
    assert any(n[0].startswith("my_tile#") for n in theirs["neighbors"]), theirs["neighbors"]
    (tmp_path / "features.json").unlink()
    done = evo("priors", "build", str(store), "-o", str(tmp_path / "q.json"), cwd=tmp_path)
    assert "(0 kernels)" in done.stdout
    assert "left out 2 kernel(s) of the stores that are not in evo's suite" in done.stderr


@needs_ptxas
def test_built_priors_hold_both_kernels_and_show_a_prior(source):
    kb = json.loads((source / "priors.json").read_text())
    assert sorted(e["kernel"] for e in kb["kernels"]) == list(SOURCES)
    assert all(e["device"] == "static" and e["genes"] for e in kb["kernels"])
    # best genomes are those that beat the baseline: 12 static trials find some on one tile
    assert any(e["best"] for e in kb["kernels"])
    out = evo("priors", "show", str(source / "priors.json"), "--kernel", TARGET,
              cwd=source).stdout
    assert "nearest: gemm_tile_2x2x" in out and "seeds: " in out


@needs_ptxas
def test_run_with_priors_seeds_generation_one_and_records_them(source, tmp_path):
    evo(*run_args(tmp_path / "run", tmp_path / "store.sqlite", 2, source / "priors.json"),
        cwd=tmp_path)
    events = events_of(tmp_path / "run")
    (announced,) = [e for e in events if e["type"] == "priors"]
    assert {n[0] for n in announced["neighbors"]} == set(SOURCES) and announced["seeds"]
    first = [e["genome"] for e in events if e["type"] == "eval" and e["generation"] == 1]
    assert first[0] == {"genes": []}
    seeds = json.loads((tmp_path / "run" / "checkpoint.json").read_text())["priors"][TARGET]
    expected = [parse_inline(s).effective().to_json() for s in seeds["seeds"][:3]]
    assert first[1:1 + len(expected)] == expected
    assert str(source / "priors.json") in (tmp_path / "run" / "config.toml").read_text()
    report = (tmp_path / "run" / "report.md").read_text()
    assert "Priors:" in report and "own measurements never count" in report


@needs_ptxas
def test_priors_auto_is_the_default_and_none_a_cold_start(source, tmp_path):
    evo(*run_args(tmp_path / "a", tmp_path / "a.sqlite", 2), cwd=tmp_path)
    evo(*run_args(tmp_path / "b", tmp_path / "b.sqlite", 2, "none"), cwd=tmp_path)
    a, b = (json.loads((tmp_path / n / "checkpoint.json").read_text()) for n in "ab")
    assert 'priors = "auto"' in (tmp_path / "a" / "config.toml").read_text()
    assert a["priors"][TARGET]["setting"] == "auto"
    assert "priors" not in b and 'priors = "none"' in (tmp_path / "b" / "config.toml").read_text()


@needs_ptxas
def test_resume_with_priors_equals_an_uninterrupted_run(source, tmp_path):
    priors = source / "priors.json"
    evo(*run_args(tmp_path / "straight", tmp_path / "s1.sqlite", 2, priors), cwd=tmp_path)
    evo(*run_args(tmp_path / "split", tmp_path / "s2.sqlite", 1, priors), cwd=tmp_path)
    evo("run", "--resume", str(tmp_path / "split"), "--generations", "2", "-q", cwd=tmp_path)
    a, b = (json.loads((tmp_path / n / "checkpoint.json").read_text())
            for n in ("straight", "split"))
    assert a["kernels"] == b["kernels"] and a["priors"] == b["priors"]
    bad = evo("run", "--resume", str(tmp_path / "split"), "--priors", "none", cwd=tmp_path,
              check=False)
    assert bad.returncode == 2 and "--priors" in bad.stderr


@needs_ptxas
def test_auto_learns_from_the_local_store_without_the_kernels_own_rows(source, tmp_path):
    import shutil

    shutil.copy(source / "store.sqlite", tmp_path / "store.sqlite")
    evo(*run_args(tmp_path / "run", tmp_path / "store.sqlite", 1, "auto", kernel=SOURCES[0]),
        cwd=tmp_path)
    prior = json.loads((tmp_path / "run" / "checkpoint.json").read_text())["priors"][SOURCES[0]]
    assert [n[0] for n in prior["neighbors"]] == [SOURCES[1]]  # not itself
    assert prior["setting"] == "auto" and any("store" in s for s in prior["sources"])
    assert (tmp_path / "features.json").is_file()  # the feature cache beside the store


@needs_ptxas
def test_bench_leave_one_out(tmp_path):
    from evo import bench
    from evo.config import Config
    from evo.learn.source import BenchPriors

    kernels = ["gemm_tile_2x2x2", "gemm_tile_2x2x4", "gemm_tile_2x4x2"]
    lines = []
    results = bench.run_bench(kernels, ["sweep", "evolve45_priors"], Config(), tmp_path,
                              backend=CodeSizeBackend(), progress=lines.append, keep_stores=True,
                              priors=BenchPriors("loo", kernels), jobs=2)
    for k in kernels:
        entry = results["kernels"][k]["evolve45_priors"]
        assert entry["evals"] <= 45 and entry["prior"]["seeds"]
        assert k not in {n[0] for n in entry["prior"]["neighbors"]}  # leave-one-out
    assert "leave-one-out" in (tmp_path / "bench.md").read_text()
    assert any("priors: learning from 3 stores" in ln for ln in lines)
    # a call with only part of the kernels' sweeps done waits, rather than learn from less
    partial = bench.run_bench(kernels[:1], ["sweep", "evolve45_priors"], Config(),
                              tmp_path / "p", backend=CodeSizeBackend(), progress=lines.append,
                              keep_stores=True, priors=BenchPriors("loo", kernels))
    assert "evolve45_priors" not in partial["kernels"]["gemm_tile_2x2x2"]
    assert "waiting until the other strategies" in lines[-1]
