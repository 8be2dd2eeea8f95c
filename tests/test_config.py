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
    # no generation measures nothing, not even the baseline (the run said it had failed)
    ({"run": {"generations": 0}}, "[run] generations must be in 1..100000"),
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


def test_llm_request_fields_and_extra_table_round_trip():
    data = tomllib.loads("""
[llm]
temperature = -1
max_tokens = 0
max_tokens_field = "max_completion_tokens"
history_chars = 500

[llm.extra]
reasoning_effort = "low"
"odd key" = [1, 2.5, true, {nested = "a\\"b"}]
""")
    c = cfg.from_dict(data, "evo.toml")
    assert c.llm.temperature == -1.0 and c.llm.max_tokens == 0
    assert c.llm.extra == {"reasoning_effort": "low", "odd key": [1, 2.5, True, {"nested": 'a"b'}]}
    again = cfg.from_dict(tomllib.loads(cfg.dumps(c)))  # as a run's config.toml, on resume
    assert again == c and again.llm.extra == c.llm.extra
    inline = cfg.from_dict({"llm": {"extra": {"reasoning_effort": "low"}}})
    assert 'extra = {reasoning_effort = "low"}' in cfg.dumps(inline)
    assert "extra = {}" in cfg.dumps(cfg.Config())
    # The order keys were written in does not change the config (nor the run's hash).
    swapped = cfg.from_dict({"llm": {"extra": {"b": 1, "a": 2}}})
    assert repr(swapped.llm.extra) == "{a = 2, b = 1}"


@pytest.mark.parametrize("table,needle", [
    ({"extra": {"temperature": 1}}, "'temperature' is not allowed there; set [llm] temperature"),
    ({"extra": {"max_tokens": 9}}, "set [llm] max_tokens"),
    ({"extra": {"stream": True}}, "'stream' is not allowed"),
    ({"extra": "reasoning_effort=low"}, "[llm] extra must be dict"),
    ({"extra": {"when": __import__("datetime").date(2024, 1, 1)}}, "[llm] extra.when must hold"),
    ({"max_tokens": 8}, "max_tokens must be 0 (not sent) or >= 16"),
    ({"temperature": 2.5}, "[llm] temperature must be in -1.0..2.0"),
    ({"max_tokens_field": "max_output_tokens"}, "must be one of max_tokens, max_completion_tokens"),
    ({"extras": {}}, "unknown key 'extras' in [llm] (did you mean 'extra'?)"),
])
def test_bad_llm_request_fields_name_the_key(table, needle):
    with pytest.raises(ConfigError) as err:
        cfg.from_dict({"llm": table}, "evo.toml")
    assert needle in str(err.value)
