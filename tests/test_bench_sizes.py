"""Suite kernels at other sizes (``relu@4M``, ``harness.kernels.resize``), as every command
names them, and harness.tools.bench_throughput's per-kernel table."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conftest import needs_ptxas

from harness.gpu import input_sets
from harness.kernels.resize import ResizeError, resized
from harness.kernels.spec import load_spec
from harness.kernels.spec_write import spec_file
from harness.kernels.suite import UnknownKernelError, find_kernel
from harness.tools.bench_throughput import format_table, main


def test_resized_elementwise_kernel_has_every_length_and_grid_changed():
    spec = find_kernel("relu@4M")
    assert spec.name == "relu@4M" and spec.store_name == "relu@4M"
    assert [p.count for p in spec.buffers()] == [4 << 20, 4 << 20]
    assert spec.param("n").value == 4 << 20
    assert spec.grid == ((4 << 20) // 256, 1, 1) and spec.block == find_kernel("relu").block
    inputs = input_sets.make_inputs(spec, 3)
    assert inputs["x"].shape == (4 << 20,)
    # A count that is no multiple of the block gets a partial last block, and its own name.
    odd = resized(find_kernel("gelu"), 1000)
    assert odd.name == "gelu@1000" and odd.grid == (4, 1, 1)


def test_a_row_kernel_grows_by_rows_and_keeps_its_row_long_buffers():
    spec = find_kernel("layernorm@4M")  # 1024 columns: 4096 rows
    assert spec.grid == (4096, 1, 1) and spec.meta["rows"] == 4096 and spec.meta["cols"] == 1024
    assert {p.name: p.count for p in spec.buffers()} == {
        "x": 4 << 20, "gamma": 1024, "beta": 1024, "y": 4 << 20}
    inputs = input_sets.make_inputs(spec, 1)
    reference = input_sets.reference_outputs(spec, inputs)
    assert reference["y"].shape == (4 << 20,)  # the NumPy reference follows meta's rows
    with pytest.raises(ResizeError, match="no whole number of rows"):
        find_kernel("softmax@1000")


@pytest.mark.parametrize("name, error", [("relu@3Q", "size after @"), ("relu@0", "size after @"),
                                         ("transpose@4M", "cannot be resized"),
                                         ("relu@4G", "does not fit the kernel's u32"),
                                         ("cross_entropy@4M", "cannot be resized")])
def test_bad_sizes_and_kernels_that_cannot_be_resized_are_refused(name, error):
    with pytest.raises(ResizeError, match=error):
        find_kernel(name)
    with pytest.raises(UnknownKernelError):
        find_kernel("no_such_kernel@4M")


def test_a_resized_spec_is_written_for_a_process_that_reads_files(tmp_path):
    spec = find_kernel("softmax@2M")
    assert spec.spec_path is None
    path = spec_file(spec, tmp_path)
    assert path.parent == tmp_path
    assert dataclasses.replace(load_spec(path), spec_path=None) == spec
    suite = find_kernel("softmax")
    assert spec_file(suite, tmp_path) == suite.spec_path  # a spec with its file keeps it


def test_per_kernel_table_on_the_static_backend_says_it_estimates(capsys, tmp_path):
    assert main(["--seconds", "0.5", "--backend", "static", "--per-kernel", "--batch", "4",
                 "--kernels", "gemm_tile_2x2x2,relu@64K", "--out", str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| gemm") or line.startswith("| relu@64K")]
    assert len(rows) == 2 and all("static estimate, not measured" in r for r in rows)
    assert "0.50 MiB" in rows[1]  # 64K floats in, 64K out
    assert main(["--seconds", "0.1", "--backend", "static", "--kernels", "relu@3Q"]) == 2
    assert format_table({}).count("\n") == 1  # a header only


@needs_ptxas
def test_evo_run_evolves_a_kernel_at_another_size_and_resumes_it(tmp_path, capsys):
    from evo.cli import main

    run = tmp_path / "run"
    args = ["run", "--kernel", "relu@64K", "--backend", "static", "--pop", "3", "--out", str(run),
            "--store", str(tmp_path / "s.sqlite"), "-q"]
    assert main([*args, "--generations", "1"]) == 0, capsys.readouterr()
    assert (run / "best" / "relu@64K.ptx").is_file()
    assert main(["run", "--resume", str(run), "--generations", "2", "-q"]) == 0, capsys.readouterr()
    checkpoint = json.loads((run / "checkpoint.json").read_text())
    assert list(checkpoint["kernels"]) == ["relu@64K"]
    assert checkpoint["kernels"]["relu@64K"]["state"]["generation"] == 2
