"""ptxas errors in the user's own lines: a spec's PTX file with several entries is narrowed
to its entry before ptxas sees it (genomes.ptx.only_entry), so ptxas counts the copy's
lines; evo says the file's line too (nvcc's two-kernel module, an error planted in the
second kernel)."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import needs_ptxas

DATA = Path(__file__).parent / "data" / "init_kernel"

SPEC = """name = "stencil"
entry = "stencil"
ptx = "hist.ptx"
grid = [4, 1, 1]
block = [256, 1, 1]
timing = "events"

[[params]]
name = "x"
kind = "buffer"
dtype = "f32"
count = 1024
role = "in"

[[params]]
name = "y"
kind = "buffer"
dtype = "f32"
count = 1024
role = "out"

[[params]]
name = "n"
kind = "scalar"
dtype = "i32"
value = 1024
"""


def _planted(tmp_path) -> tuple[Path, int]:
    """hist.ptx with a bad modifier in the stencil entry: its spec, and the file's line."""
    shutil.copy(DATA / "hist.ptx", tmp_path / "hist.ptx")
    lines = (tmp_path / "hist.ptx").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if ".entry stencil" in line)
    at = next(i for i in range(start, len(lines)) if "mul.wide.s32" in lines[i])
    lines[at] = lines[at].replace("mul.wide.s32", "mul.wide.q32")
    (tmp_path / "hist.ptx").write_text("\n".join(lines) + "\n")
    (tmp_path / "stencil.toml").write_text(SPEC)
    return tmp_path / "stencil.toml", at + 1


@needs_ptxas
def test_compile_names_the_line_of_the_users_file(tmp_path, capsys):
    from evo.cli import main

    spec, line = _planted(tmp_path)
    assert main(["compile", str(spec)]) == 1
    out = capsys.readouterr().out
    assert f"(hist.ptx line {line}): error: Unknown modifier '.q32'" in out, out


@needs_ptxas
def test_a_baseline_that_does_not_assemble_says_the_file_line(tmp_path):
    from evo import api

    spec, line = _planted(tmp_path)
    m = api.measure(str(spec), backend="static", store=":memory:")
    assert m.valid is False and f"(hist.ptx line {line})" in m.reason, m.reason


def test_a_file_of_one_entry_is_left_as_ptxas_says_it(tmp_path):
    from harness.kernels.spec_ptx import in_file_lines
    from harness.kernels.suite import find_kernel

    relu = find_kernel("relu")  # one entry: ptxas's lines are the file's
    assert in_file_lines(relu, "line 12: error: x") == "line 12: error: x"
