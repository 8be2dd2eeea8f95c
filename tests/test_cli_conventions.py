"""CLI conventions: --version, --json, exit statuses, -q, and help text with defaults.
Real ptxas, the static backend; a subprocess where what the user's shell sees is the point."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tomllib

import pytest

from conftest import ROOT, gpu_available, needs_ptxas
from evo import exit_codes
from evo.cli import build_parser, main

KERNEL = "gemm_tile_2x2x2"


def evo(*args, cwd=ROOT, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evo.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def as_json(capsys, args) -> dict:
    assert main([str(a) for a in args]) == exit_codes.OK
    return json.loads(capsys.readouterr().out)


def subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions
                  if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


# ------------------------------------------------------------ --version
def test_version_flag_prints_the_package_version():
    import evo as evo_pkg

    proc = evo("--version")
    assert proc.returncode == 0 and proc.stdout == f"evo {evo_pkg.__version__}\n", proc
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert evo_pkg.__version__ == pyproject  # installed from this tree: the same one source


def test_version_falls_back_to_pyproject_when_not_installed(monkeypatch):
    from importlib import metadata

    import evo as evo_pkg

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    evo_pkg.version.cache_clear()
    try:
        pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
        assert evo_pkg.__version__ == pyproject
    finally:
        evo_pkg.version.cache_clear()


# ------------------------------------------------------------ --json
def test_kernels_and_transforms_json_hold_what_the_text_lists(capsys):
    from genomes import transforms

    doc = as_json(capsys, ["kernels", "--json"])
    assert main(["kernels"]) == 0
    text_names = [ln.split()[0] for ln in capsys.readouterr().out.splitlines()[1:]]
    assert [k["name"] for k in doc["kernels"]] == text_names
    first = doc["kernels"][0]
    assert {"grid", "block", "timer", "description"} <= set(first) and len(first["grid"]) == 3

    doc = as_json(capsys, ["transforms", "--json"])
    assert [t["name"] for t in doc["transforms"]] == list(transforms.registry())
    maxnreg = next(t for t in doc["transforms"] if t["name"] == "maxnreg")
    assert maxnreg["params"][0]["low"] == 16 and maxnreg["params"][0]["high"] == 255
    assert doc["aliases"]["cache_cs"] == {"transform": "cache_ld", "params": {"policy": "cs"}}


@needs_ptxas
def test_compile_json_and_a_ptxas_failure(tmp_path, capsys):
    doc = as_json(capsys, ["compile", KERNEL, "--genome", "maxnreg(n=64)", "--json"])
    assert doc["ok"] and doc["arch"] == "sm_90" and doc["registers"] > 0
    assert doc["spill_stores"] == 0 and doc["cubin_bytes"] > 0
    bad = tmp_path / "bad.ptx"  # parses, but names a register it never declared
    text = (ROOT / "harness" / "kernels" / f"{KERNEL}.ptx").read_text()
    bad.write_text(text.replace("\tret;", "\tmov.u32 %r999, 1;\n\tret;", 1))
    assert main(["compile", str(bad), "--json"]) == exit_codes.FAILURE
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and "%r999" in doc["error"]
    assert main(["compile", str(bad)]) == exit_codes.FAILURE  # runtime failure, not usage
    assert capsys.readouterr().out.startswith("ptxas failed:")


@needs_ptxas
def test_measure_and_store_stats_json_say_static(tmp_path, capsys):
    store = tmp_path / "s.sqlite"
    doc = as_json(capsys, ["measure", KERNEL, "--genome", "vec_st", "--backend", "static",
                           "--store", store, "--json"])
    assert doc["static"] is True and doc["note"] == "static estimate, not measured"
    assert doc["valid"] is None and doc["checked"] is False  # no GPU ran it
    assert doc["variant"]["cycles"] > 0 and doc["baseline"]["timer"] == "static"
    assert doc["speedup"] == pytest.approx(doc["baseline"]["cycles"] / doc["variant"]["cycles"])
    assert doc["genome_text"] == "vec_st(width=4)" and doc["kernel"] == KERNEL

    doc = as_json(capsys, ["store", "stats", store, "--json"])
    assert doc["rows"] == [{"device": "static", "kernel": KERNEL, "measurements": 2,
                            "valid": 2, "static": True}]
    assert main(["store", "check", str(store), "--json"]) == exit_codes.USAGE


@needs_ptxas
def test_run_q_prints_the_table_and_show_json(tmp_path, capsys):
    proc = evo("run", "--kernel", KERNEL, "--backend", "static", "--generations", "1",
               "--pop", "2", "--seed", "3", "--store", "s.sqlite", "--priors", "none",
               "--out", "run", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no progress
    assert proc.stdout.splitlines()[0].split()[:3] == ["kernel", "baseline", "best"]
    assert KERNEL in proc.stdout and "run folder: run" in proc.stdout

    doc = as_json(capsys, ["show", tmp_path / "run", "--json"])
    assert doc["static"] is True and "static estimate" in doc["note"]
    (kernel,) = doc["kernels"]
    assert kernel["kernel"] == KERNEL and kernel["static"] is True
    assert kernel["speedup"] == pytest.approx(kernel["baseline_cycles"] / kernel["best_cycles"])
    # estimates that assembled are not "valid": nothing checked their outputs
    assert kernel["best"]["valid"] is None and kernel["best"]["checked"] is False
    assert kernel["baseline"]["valid"] is None and kernel["baseline"]["cycles"] > 0
    assert main(["show", str(tmp_path / "run")]) == 0  # the text, unchanged: a table
    assert capsys.readouterr().out.splitlines()[0].startswith("kernel")


def test_bench_q_silences_progress_not_the_table(tmp_path, monkeypatch, capsys):
    from evo import bench

    def fake_run_bench(todo, strategies, base, out, backend_kind, progress, **kw):
        progress(f"{todo[0]} greedy: 122 -> 50 cycles")
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench.md").write_text("| kernel | baseline |\n")
        return {"kernels": {k: {} for k in todo}}

    monkeypatch.setattr(bench, "run_bench", fake_run_bench)
    args = ["bench", "--suite", KERNEL, "--strategies", "greedy", "--backend", "static",
            "--out", str(tmp_path / "b")]
    assert main(args) == 0
    loud = capsys.readouterr()
    assert "122 -> 50" in loud.err and "| kernel |" in loud.out
    assert main([*args, "-q"]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == "" and quiet.out == loud.out


# ------------------------------------------------------------ exit statuses
@pytest.mark.parametrize("args", [
    ["--bogus"],                                          # argparse
    ["run", "--gpus", "x"],                               # a bad flag value
    ["run", "--config", "bad.toml", "--backend", "static"],  # a bad config key
    ["measure", "gemm_tile_9x9x9", "--backend", "static"],   # an unknown kernel name
    ["apply", "vec_lld", KERNEL],                         # an unknown transform
], ids=["argparse", "flag-value", "config-key", "kernel", "transform"])
def test_usage_errors_exit_with_the_usage_status(tmp_path, args):
    (tmp_path / "bad.toml").write_text("[run]\ngeneratons = 3\n")
    proc = evo(*args, cwd=tmp_path)
    assert proc.returncode == exit_codes.USAGE == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "error:" in proc.stderr


def test_runtime_failures_exit_with_the_failure_status(tmp_path):
    proc = evo("compile", KERNEL, env={"EVO_PTXAS": str(tmp_path / "nope")})  # no ptxas
    assert proc.returncode == exit_codes.FAILURE, proc.stderr
    if not gpu_available():
        proc = evo("measure", KERNEL, "--backend", "gpu", "--store", tmp_path / "s.sqlite")
        assert proc.returncode == exit_codes.FAILURE and "could not start" in proc.stderr


def test_interrupted_exits_130(monkeypatch, capsys):
    from evo import commands

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "cmd_kernels", interrupted)
    assert main(["kernels"]) == exit_codes.INTERRUPTED == 130
    assert "interrupted" in capsys.readouterr().err


def test_exit_statuses_are_documented_in_help_and_readme():
    help_text = evo("--help").stdout
    readme = (ROOT / "README.md").read_text()
    for code, what in exit_codes.TABLE:
        assert re.search(rf"^  {code}\s+{re.escape(what.split(':')[0])}", help_text, re.M), code
        assert f"| {code} | {what} |" in readme, code
    assert len({code for code, _ in exit_codes.TABLE}) == len(exit_codes.TABLE)


# ------------------------------------------------------------ help text and defaults
def test_every_option_and_positional_has_help_and_no_none_default():
    for name, parser in subparsers().items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help and action.help.strip(), (name, action.dest)
        text = parser.format_help()
        for noise in ("(default: None)", "(default: False)", "(default: )"):
            assert noise not in text, (name, noise)


def test_defaults_are_shown():
    commands = subparsers()
    flat = {name: " ".join(p.format_help().split()) for name, p in commands.items()}
    assert "(default: gemm64)" in flat["bench"]
    assert "(default: 8)" in flat["bench"] or "(default 8)" in flat["bench"]
    assert "(default: 0)" in flat["measure"]  # --seed, which said nothing before
    assert "else 9)" in flat["run"] and "else runs/store.sqlite)" in flat["run"]
    assert "(default: sm_90" in flat["compile"] or "(default sm_90" in flat["compile"]
    top = " ".join(build_parser().format_help().split())
    assert "--version" in top and "exit status:" in top


def test_a_genome_given_without_genome_flag_gets_a_hint(capsys):
    """`evo measure relu 'vec_ld(width=4)'` (as `evo apply` takes it): the usage error says
    where a genome goes; an unrecognized word that is no gene gets no such hint."""
    import pytest

    from evo.cli import main

    for argv, hint in ((["measure", "relu", "vec_ld(width=4)"], True),
                       (["compile", "relu", "maxnreg(n=32),vec_st"], True),
                       (["measure", "relu", "foo"], False)):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert ("a genome goes after --genome: --genome '" in err) == hint, err
