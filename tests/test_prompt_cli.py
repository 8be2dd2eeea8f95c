"""evo prompt: the exact messages a run would send the LLM, printed without a call."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import needs_ptxas


def _evo(*args, cwd):
    return subprocess.run([sys.executable, "-m", "evo.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@needs_ptxas
def test_prompt_of_a_fresh_search_and_its_modes(tmp_path):
    proc = _evo("prompt", "softmax", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("===== system =====")
    assert "===== user =====" in proc.stdout and "# Kernel `softmax`" in proc.stdout
    assert "Be bold" not in proc.stdout and "# Top" not in proc.stdout  # nothing measured
    explore = _evo("prompt", "softmax", "--mode", "explore", "--json", cwd=tmp_path)
    messages = json.loads(explore.stdout)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "Be bold" in messages[1]["content"]
    cross = _evo("prompt", "softmax", "--genome", "unroll(factor=2)", "--other", "fast_exp",
                 cwd=tmp_path)
    assert "# Genome of the current variant: `unroll(factor=2)`" in cross.stdout
    assert "# The second parent: `fast_exp`" in cross.stdout


@needs_ptxas
def test_prompt_as_in_a_run_and_clear_errors(tmp_path):
    run = _evo("run", "--kernel", "gemm_tile_2x4x4", "--generations", "2", "--pop", "4",
               "--backend", "static", "--priors", "none", "--out", "r", "--store", "s.sqlite",
               "-q", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    shown = _evo("show", "r", "--json", cwd=tmp_path)
    best = json.loads(shown.stdout)["kernels"][0]["best_genome_text"]
    proc = _evo("prompt", "gemm_tile_2x4x4", "--run", "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"# Genome of the current variant: `{best}`" in proc.stdout
    assert "variants of this kernel so far" in proc.stdout and "static estimate" in proc.stdout
    bad = _evo("prompt", "softmax", "--run", "r", cwd=tmp_path)
    assert bad.returncode == 2 and "no kernel 'softmax' in the run" in bad.stderr
