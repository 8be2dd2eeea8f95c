"""evo.toml: strict validation, overrides, and the TOML written into a run."""

from __future__ import annotations

import tomllib

import pytest

from conftest import ROOT
from evo import config as cfg
from evo.config import ConfigError


def test_default_file_loads():
    c = cfg.load(ROOT / "evo.toml")
    assert c.run.strategy in cfg.STRATEGIES and c.run.suite


def test_dumps_round_trips():
    c = cfg.from_dict({"run": {"generations": 4, "suite": ["a", "b*"]}, "evolve": {"cxpb": 1}})
    again = cfg.from_dict(tomllib.loads(cfg.dumps(c)))
    assert again == c and again.evolve.cxpb == 1.0


@pytest.mark.parametrize("data,needle", [
    ({"run": {"generatons": 3}}, "unknown key 'generatons' in [run] (did you mean 'generations'?)"),
    ({"rnu": {}}, "unknown section [rnu] (did you mean 'run'?)"),
    ({"run": {"pop": "5"}}, "[run] pop must be int"),
    ({"run": {"pop": 0}}, "[run] pop must be in 1..10000"),
    ({"run": {"strategy": "evolv"}}, "did you mean 'evolve'?"),
    ({"evolve": {"cxpb": 1.5}}, "[evolve] cxpb must be in 0.0..1.0"),
    ({"run": {"seed": True}}, "[run] seed must be int"),
])
def test_bad_values_name_the_key(data, needle):
    with pytest.raises(ConfigError) as err:
        cfg.from_dict(data, "evo.toml")
    assert needle in str(err.value) and str(err.value).startswith("evo.toml: ")


def test_cli_override_is_validated():
    c = cfg.Config().override("run", generations=3, pop=None)
    assert c.run.generations == 3 and c.run.pop == cfg.RunConfig().pop
    with pytest.raises(ConfigError, match="generations must be"):
        cfg.Config().override("run", generations=-1)


def test_bad_toml_and_missing_file(tmp_path):
    bad = tmp_path / "evo.toml"
    bad.write_text("[run\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        cfg.load(bad)
    with pytest.raises(ConfigError, match="not found"):
        cfg.load(tmp_path / "none.toml")
