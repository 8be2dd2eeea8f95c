"""A new transform with an integer parameter is one new file: its own range decides the
values searches give it (``Param.values``, ``steps``, ``nearby``, ``snap``), and no search
code names it. Here one is added for the test (``knob``, k in 1..8, on top of the real
library) and every strategy searches with it."""

from __future__ import annotations

import random

import pytest

import genomes.transforms as transforms_mod
from evo.config import Config
from evo.learn.priors import gene_key
from evo.strategies.evolve import _neighbors
from genomes.genome import Gene, Genome
from genomes.transforms.base import Param, Transform
from genomes.variation import MAXNREG_LADDER, gene_alphabet, reparameterize
from tests.test_search import run


def _apply(module, k: int) -> int:
    for fn in module.entries:
        fn.directives = f"\n// knob {k}" + fn.directives
    return len(module.entries)


KNOB = Transform(name="knob", group="knob", summary="a test knob", applies_when="always",
                 params=(Param("k", default=1, low=1, high=8),), apply=_apply)


@pytest.fixture
def knob(monkeypatch):
    table = {**transforms_mod.registry(), "knob": KNOB}
    monkeypatch.setattr(transforms_mod, "registry", lambda: table)
    return KNOB


def test_an_int_range_brings_its_own_values_steps_and_ladder(knob):
    p = knob.param("k")
    assert p.values() == tuple(range(1, 9))  # a range of 8: every value
    assert [str(g) for g in gene_alphabet() if g.transform == "knob"] == [f"knob(k={k})" for k in range(1, 9)]
    assert p.steps() == (-3, -1, 1, 3)  # 1, 2 and 4 eighths of the span 7, at least 1
    assert p.nearby(1) == [2] and p.nearby(5) == [4, 6]
    wide = Param("n", default=0, low=0, high=1000)
    assert wide.values() == (0, 143, 286, 429, 571, 714, 857, 1000)
    assert wide.snap(150) == 143 and wide.snap(-5) == 0
    rng = random.Random(3)
    for _ in range(50):
        moved = dict(reparameterize(Gene.make("knob", k=4), rng).params)["k"]
        assert 1 <= moved <= 8 and moved != 4
    assert gene_key(Gene.make("knob", k=7)) == "knob(k=7)"


def test_maxnreg_keeps_its_ladder_and_moves(knob):
    p = transforms_mod.get("maxnreg").param("n")
    assert MAXNREG_LADDER == (32, 64, 96, 128, 160, 192, 224, 255)
    assert p.nearby(128) == [112, 120, 136, 144] and p.nearby(250) == [234, 242]
    assert gene_key(Gene.make("maxnreg", n=100)) == "maxnreg(n=96)"


def test_local_search_moves_the_new_parameter(knob):
    class Search:
        def alphabet(self):
            return []

        def seen(self, genome):
            return False

    best = Genome((Gene.make("knob", k=4), Gene.make("maxnreg", n=64)))
    moved = {str(g) for g in _neighbors(best, 100, Search(), random.Random(0))}
    assert {"knob(k=3),maxnreg(n=64)", "knob(k=5),maxnreg(n=64)",
            "knob(k=4),maxnreg(n=48)", "knob(k=4),maxnreg(n=72)"} <= moved


@pytest.mark.parametrize("strategy", ["evolve", "greedy", "sweep"])
def test_every_strategy_searches_with_the_new_transform(knob, strategy):
    config = Config().override("run", strategy=strategy, generations=6, pop=8, max_evals=200)
    config = config.override("evolve", local_search=2, init="sweep")  # every gene alone first
    result, _, events = run(config)
    tried = [str(Genome.from_json(e["genome"])) for e in events if e["type"] == "eval"]
    assert result.evals > 0 and any("knob(" in g for g in tried), tried
