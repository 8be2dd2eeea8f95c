"""`evo init-kernel` infers what the PTX proves: each pointer's dtype from its global
accesses and its role from whether it is read, written or both (nvcc's output of
tests/data/init_kernel/hist.cu, which this repository did not write for the suite); what
it cannot prove stays TODO, and a skeleton filled in that far loads and measures."""

from __future__ import annotations

import tomllib
from pathlib import Path

from conftest import needs_ptxas
from evo import api
from harness.kernels.spec import load_spec
from harness.kernels.spec_ptx import pointer_uses, spec_skeleton
from harness.kernels.suite import find_kernel

DATA = Path(__file__).parent / "data" / "init_kernel"


def test_dtype_and_role_come_from_the_accesses():
    ptx = (DATA / "hist.ptx").read_text()
    hist = pointer_uses(ptx, "histogram256")
    assert (hist["histogram256_param_0"].dtype, hist["histogram256_param_0"].role) == ("u8", "in")
    # atomicAdd: read and written, as u32
    assert (hist["histogram256_param_1"].dtype, hist["histogram256_param_1"].role) == ("u32", "inout")
    stencil = pointer_uses(ptx, "stencil")
    assert (stencil["stencil_param_0"].dtype, stencil["stencil_param_0"].role) == ("f32", "in")
    assert (stencil["stencil_param_1"].dtype, stencil["stencil_param_1"].role) == ("f32", "out")
    # the suite's embedding gather: int32 indices, and a table read at an index loaded from
    # memory (the index's origin is unknown, the table's pointer is still its param)
    spec = find_kernel("embedding_gather")
    uses = pointer_uses(spec.ptx_text(), spec.entry)
    names = [p.name for p in spec.params]
    assert [uses[f"{spec.entry}_param_{i}"].dtype for i in range(3)] == [
        spec.param(names[i]).dtype for i in range(3)]
    assert [uses[f"{spec.entry}_param_{i}"].role for i in range(3)] == ["in", "in", "out"]


def test_triton_bits_are_a_guess_left_to_the_user():
    spec = find_kernel("triton_add")
    skeleton = spec_skeleton(spec.ptx_text(), spec.entry)
    assert 'dtype = "TODO"' in skeleton and "f32, i32 or u32?" in skeleton
    # z is only written, under a mask that is not i < n (Triton's offsets): judged whole
    assert 'role = "in"' in skeleton and 'role = "inout"' in skeleton and 'role = "out"' not in skeleton


@needs_ptxas
def test_a_stencil_skeleton_needs_no_value_by_hand(tmp_path):
    """The index guard (0 < i < n - 1) names n: the counts, n and the grid follow from it,
    and the output, written only between the borders, is judged whole (inout)."""
    text = spec_skeleton((DATA / "hist.ptx").read_text(), "stencil", ptx_name=str(DATA / "hist.ptx"))
    assert text.count('= "TODO"') == 0, text
    path = tmp_path / "stencil.toml"
    path.write_text(text)
    spec = load_spec(path)
    x, y = spec.buffers()
    (n,) = spec.scalars()
    assert (x.role, y.role) == ("in", "inout") and x.count == y.count == n.value
    assert spec.grid[0] * spec.block[0] == n.value and spec.timing == "events"
    assert api.measure(spec, backend="static", store=":memory:").cycles > 0


def test_a_histogram_skeleton_leaves_only_what_the_ptx_cannot_say():
    """i < n bounds the data (its count is n); the bins are addressed by the data's values,
    not by i: their count and the values' range are the user's (two values)."""
    text = spec_skeleton((DATA / "hist.ptx").read_text(), "histogram256")
    assert text.count('= "TODO"') == 2, text
    table = tomllib.loads(text.replace('"TODO"', "256"))
    data, bins, n = table["params"]
    assert data["count"] == n["value"] and data["role"] == "in"
    assert bins["role"] == "inout" and "count" in bins


def test_the_guard_agrees_with_the_suites_hand_written_specs():
    """Where the index guard is found, the counts it gives are the specs' own; 2-D kernels
    (transpose) and per-row ones (softmax) get nothing, and batch norm's per-channel
    tables, addressed through i / hw % channels, are not counted as n."""
    from harness.kernels.ptx_index import index_guard
    from harness.kernels.suite import list_kernels

    found = 0
    for spec in list_kernels():
        guard = index_guard(spec.ptx_text(), spec.entry)
        if guard is None:
            continue
        found += 1
        params = {f"{spec.entry}_param_{i}": p for i, p in enumerate(spec.params)}
        size = params[guard.size].value
        assert {params[q].name: params[q].count for q in guard.indexed} == {
            params[q].name: size for q in guard.indexed}, spec.name
    assert found >= 10
    for name in ("transpose", "softmax", "gemm_tile_4x4x4"):
        spec = find_kernel(name)
        assert index_guard(spec.ptx_text(), spec.entry) is None, name
    bn = find_kernel("batchnorm_infer")
    names = {f"{bn.entry}_param_{i}": p.name for i, p in enumerate(bn.params)}
    assert {names[q] for q in index_guard(bn.ptx_text(), bn.entry).indexed} == {"x", "y"}


SCALE_ADD, CLAMP, HALF_SQ = "_Z9scale_addIfEvPT_PKS0_S0_x", "_Z12clamp_struct6Params", "_Z7half_sqP6__halfPKS_i"


def test_cxx_kernels_an_int64_size_a_half_and_a_struct():
    """nvcc's C++ kernels (tests/data/init_kernel/cxx.cu): the int64 size the index guard
    bounds by is a scalar, not a pointer; __half data moved as .u16 is said to be f16 or
    bf16; a struct passed by value is refused with what to do instead."""
    import pytest

    from harness.kernels.spec import SpecError

    ptx = (DATA / "cxx.ptx").read_text()
    table = tomllib.loads(spec_skeleton(ptx, SCALE_ADD).replace('"TODO"', "2.0"))
    y, x, a, n = table["params"]
    assert (n["kind"], n["dtype"], n["value"]) == ("scalar", "u64", y["count"])
    assert (y["role"], x["role"], a["kind"]) == ("inout", "in", "scalar")
    half = spec_skeleton(ptx, HALF_SQ)
    assert half.count("f16 or bf16? (from") == 2 and "not accessed" not in half
    with pytest.raises(SpecError, match=r"param param_0 is 32 bytes \(a struct passed by value"):
        spec_skeleton(ptx, CLAMP)
    shifted = spec_skeleton(ptx, "shifted")  # a short: no dtype of evo's takes it, said so
    assert 'dtype = "TODO"                   # from .u16: evo has no 16-bit integer dtype' in shifted


def test_a_kernel_of_many_threads_without_a_guard_leaves_its_launch_to_the_user():
    """A 2-D transpose (no i < n guard) reads its block and thread indices: its grid and
    block are TODO (a skeleton of one thread would be measured as one element, baseline
    and variant alike); a one-thread gemm tile, which reads neither, keeps one thread."""
    transpose, tile = find_kernel("transpose"), find_kernel("gemm_tile_2x2x2")
    wide = spec_skeleton(transpose.ptx_text(), transpose.entry)
    assert 'grid = "TODO"' in wide and 'block = "TODO"' in wide and 'timing = "events"' in wide
    one = spec_skeleton(tile.ptx_text(), tile.entry)
    assert "grid = [1, 1, 1]" in one and 'timing = "clock64"' in one
