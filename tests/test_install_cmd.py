"""evo install on the CPU: without a program it prints what the run would install and the
environment that makes a program launch it unchanged; the start-up hook
(evo/model/autoinstall/sitecustomize.py) in a real Python process: silent without
EVO_INSTALL, a bad value said on stderr while the program still runs, the sitecustomize
it shadows still run. The GPU half (the evolved code runs) is in tests/test_program_gpu.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from evo.cli import main
from evo.model import capture
from evo.model.install_cmd import AUTOINSTALL, SEPARATOR, environment
from genomes.genome import apply_genome, parse_inline

from conftest import needs_ptxas

DECODER = Path(__file__).parent / "data" / "capture" / "decoder"


@needs_ptxas
def test_without_a_program_it_prints_the_plan_and_the_environment(tmp_path, capsys):
    spec = capture.read(DECODER)["kernels"][0]["kernel_spec"]
    run = tmp_path / "run"
    (run / "best").mkdir(parents=True)
    (run / "checkpoint.json").write_text(json.dumps({"kernels": {}}))
    assert main(["install", "--model", str(DECODER), "--run", str(run)]) == 1  # nothing yet
    assert "nothing of the run to install" in capsys.readouterr().err
    genome = parse_inline("maxnreg(n=32)")
    (run / "best" / f"{spec.name}.ptx").write_text(apply_genome(spec.ptx_text(), genome).ptx)
    (run / "best" / f"{spec.name}.genome.json").write_text(json.dumps(genome.to_json()))
    assert main(["install", "--model", str(DECODER), "--run", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"  {spec.name}: evolved code  [maxnreg(n=32)]" in out
    assert "1 kernel(s) to install" in out and f"EVO_INSTALL={DECODER.resolve()}{SEPARATOR}" in out
    assert f"PYTHONPATH={AUTOINSTALL}" in out and "evo.install(model=" in out


def _python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


@needs_ptxas
def test_a_static_run_is_never_installed(tmp_path, capsys):
    """A run searched by the static backend (estimates: no GPU ran or checked its kernels):
    `evo install` refuses it (exit 2, saying why and what to run), and so does evo.install
    (the start-up hook then says so and the program runs its own kernels). It printed
    "1 kernel(s) to install" and the environment that would launch an unchecked kernel."""
    import pytest

    import evo
    from genomes.errors import EvoError

    run = tmp_path / "run"
    assert main(["run", "--model", str(DECODER), "--backend", "static", "--generations", "2",
                 "--pop", "3", "--out", str(run), "--store", str(tmp_path / "s.sqlite"), "-q"]) == 0
    capsys.readouterr()
    assert main(["install", "--model", str(DECODER), "--run", str(run)]) == 2
    err = capsys.readouterr().err
    assert "searched by the static backend" in err and "--backend gpu" in err, err
    with pytest.raises(EvoError, match="no GPU ran or checked"):
        evo.install(model=str(DECODER), run=str(run))


def test_the_start_up_hook_is_silent_says_a_bad_value_and_runs_what_it_shadows(tmp_path):
    assert (AUTOINSTALL / "sitecustomize.py").is_file()
    shadowed = tmp_path / "theirs"
    shadowed.mkdir()
    (shadowed / "sitecustomize.py").write_text("print('their sitecustomize ran')\n")
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join([str(AUTOINSTALL), root, str(shadowed)])
    quiet = _python("print('program')", {"PYTHONPATH": path, "EVO_INSTALL": ""})
    assert quiet.returncode == 0 and quiet.stdout == "their sitecustomize ran\nprogram\n", quiet
    assert quiet.stderr == ""
    bad = _python("print('program')", {"PYTHONPATH": path, "EVO_INSTALL": "no-separator"})
    assert bad.returncode == 0 and bad.stdout.endswith("program\n"), bad
    assert "evo: EVO_INSTALL: the program runs its own kernels: ValueError" in bad.stderr
    env = environment(DECODER, tmp_path / "run")
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [str(AUTOINSTALL), root]  # evo from source
    assert env["EVO_INSTALL"] == f"{DECODER.resolve()}{SEPARATOR}{(tmp_path / 'run').resolve()}"


def test_evo_commands_take_out_what_the_start_up_hook_put_in(monkeypatch):
    """An EVO_INSTALL exported in the shell also reaches evo capture/verify/install, which
    put in (or leave out) kernels of their own: the hook's kernels come out first."""
    from evo.model import install_cmd

    removed = []
    monkeypatch.setattr(install_cmd, "started_with", type("I", (), {"remove": lambda self: removed.append(1)})())
    install_cmd.without_start_up_install()
    install_cmd.without_start_up_install()  # once only
    assert removed == [1] and install_cmd.started_with is None
