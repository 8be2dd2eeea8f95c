"""harness.tools.bench_throughput's kernels at other sizes (``relu@4M``) and its per-kernel table."""

from __future__ import annotations

import pytest

from harness.gpu import input_sets
from harness.tools.bench_throughput import format_table, kernel_spec, main, resized
from harness.kernels.suite import find_kernel


def test_resized_elementwise_kernel_has_every_length_and_grid_changed():
    spec = kernel_spec("relu@4M")
    assert spec.name == "relu@4M" and spec.store_name == "relu@4M"
    assert [p.count for p in spec.buffers()] == [4 << 20, 4 << 20]
    assert spec.param("n").value == 4 << 20
    assert spec.grid == ((4 << 20) // 256, 1, 1) and spec.block == find_kernel("relu").block
    inputs = input_sets.make_inputs(spec, 3)
    assert inputs["x"].shape == (4 << 20,)
    # A count that is no multiple of the block gets a partial last block, and its own name.
    odd = resized(find_kernel("gelu"), 1000)
    assert odd.name == "gelu@1000" and odd.grid == (4, 1, 1)


@pytest.mark.parametrize("name, error", [("relu@3Q", "size after @"), ("relu@0", "size after @"),
                                         ("softmax@4M", "not an elementwise kernel")])
def test_bad_sizes_and_kernels_that_cannot_be_resized_are_refused(name, error):
    with pytest.raises(ValueError, match=error):
        kernel_spec(name)


def test_per_kernel_table_on_the_static_backend_says_it_estimates(capsys, tmp_path):
    assert main(["--seconds", "0.5", "--backend", "static", "--per-kernel", "--batch", "4",
                 "--kernels", "gemm_tile_2x2x2,relu@64K", "--out", str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| gemm") or line.startswith("| relu@64K")]
    assert len(rows) == 2 and all("static estimate, not measured" in r for r in rows)
    assert "0.50 MiB" in rows[1]  # 64K floats in, 64K out
    assert main(["--seconds", "0.1", "--backend", "static", "--kernels", "relu@3Q"]) == 2
    assert format_table({}).count("\n") == 1  # a header only
