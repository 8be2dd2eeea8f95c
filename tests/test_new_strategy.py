"""A new strategy is one new file: dropped into evo/strategies/ (of a copy of evo, so the
repository stays as it is), it is a choice of `evo run --strategy`, its options are a
table of evo.toml (checked like any other, and kept out of the resume check where it says
they are a budget), its generations size the progress, and `evo bench` runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_ptxas

ROOT = Path(__file__).resolve().parents[1]

RANDOM_WALK = '''"""Random walk: from the baseline, one random gene added or replaced per step."""

from __future__ import annotations

from dataclasses import dataclass

from genomes.genome import Genome
from genomes.variation import mutate

from evo.options import opt


@dataclass(frozen=True)
class Options:
    steps: int = opt(3, lo=1, hi=50, doc="steps of the walk")


BUDGET = ("steps",)


def generations(config) -> int:
    return config.random_walk.steps


def start(search) -> dict:
    return {"generation": 0, "at": Genome().to_json(), "fitness": None}


def step(state, search):
    generation = state["generation"] + 1
    here = Genome.from_json(state["at"])
    nxt, _ = mutate(here, search.rng, 8, draw=None)
    result = search.evaluate([here, nxt], generation=generation)
    best, fit = min(zip((here, nxt), result), key=lambda gr: gr[1].fitness)
    return {"generation": generation, "at": best.to_json(), "fitness": fit.fitness}


def finished(state, search) -> bool:
    return state["generation"] >= search.config.random_walk.steps


def best(state):
    return state["at"], state["fitness"]
'''


@pytest.fixture(scope="module")
def evo_copy(tmp_path_factory):
    """A copy of the evo package with one more file in evo/strategies/."""
    root = tmp_path_factory.mktemp("evo_copy")
    shutil.copytree(ROOT / "evo", root / "evo", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "evo" / "strategies" / "random_walk.py").write_text(RANDOM_WALK)
    return root


def _evo(evo_copy: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(evo_copy), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "evo.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_its_options_are_a_checked_table_of_the_config(evo_copy, tmp_path):
    (tmp_path / "bad.toml").write_text("[random_walk]\nsteps = 0\n")
    done = _evo(evo_copy, tmp_path, "run", "--config", "bad.toml", "--strategy", "random_walk",
                "--backend", "static")
    assert done.returncode == 2 and "[random_walk] steps must be in 1..50" in done.stderr, done.stderr
    shown = " ".join(_evo(evo_copy, tmp_path, "run", "--help").stdout.split())
    assert "random_walk: from the baseline, one random gene added or replaced per step" in shown


@needs_ptxas
def test_it_runs_resumes_with_more_steps_and_is_benched(evo_copy, tmp_path):
    (tmp_path / "evo.toml").write_text("[random_walk]\nsteps = 2\n")
    run = tmp_path / "run"
    common = ["--kernel", "gemm_tile_2x2x2", "--backend", "static", "--store", "s.sqlite", "-q"]
    done = _evo(evo_copy, tmp_path, "run", "--strategy", "random_walk", "--out", str(run), *common)
    assert done.returncode == 0, done.stderr
    saved = json.loads((run / "checkpoint.json").read_text())
    state = saved["kernels"]["gemm_tile_2x2x2"]["state"]
    assert state["generation"] == 2
    assert "steps = 2" in (run / "config.toml").read_text()
    # steps is its budget: raised in the run's config, the resume check lets it be, and
    # the walk goes on
    saved_config = (run / "config.toml").read_text()
    (run / "config.toml").write_text(saved_config.replace("steps = 2", "steps = 4"))
    done = _evo(evo_copy, tmp_path, "run", "--resume", str(run), "-q")
    assert done.returncode == 0, done.stderr
    state = json.loads((run / "checkpoint.json").read_text())["kernels"]["gemm_tile_2x2x2"]["state"]
    assert state["generation"] == 4
    done = _evo(evo_copy, tmp_path, "bench", "--suite", "gemm_tile_2x2x2", "--strategies",
                "random_walk", "--backend", "static", "--out", "bench")
    assert done.returncode == 0, done.stderr
    results = json.loads((tmp_path / "bench" / "results.json").read_text())
    assert "random_walk" in results["kernels"]["gemm_tile_2x2x2"]
