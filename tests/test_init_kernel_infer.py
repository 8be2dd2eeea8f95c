"""`evo init-kernel` infers what the PTX proves: each pointer's dtype from its global
accesses and its role from whether it is read, written or both (nvcc's output of
tests/data/init_kernel/hist.cu, which this repository did not write for the suite); what
it cannot prove stays TODO, and a skeleton filled in that far loads and measures."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from conftest import needs_ptxas
from evo import api
from harness.spec import load_spec
from harness.spec_ptx import pointer_uses, spec_skeleton
from harness.suite import find_kernel

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
    assert 'role = "in"' in skeleton and 'role = "out"' in skeleton


@needs_ptxas
def test_a_skeleton_filled_with_counts_grid_and_n_loads_and_measures(tmp_path):
    n = 1 << 16
    text = spec_skeleton((DATA / "hist.ptx").read_text(), "stencil", ptx_name=str(DATA / "hist.ptx"))
    assert text.count('= "TODO"') == 3  # two counts and the scalar n: all the PTX cannot say
    filled = re.sub(r'count = "TODO"', f"count = {n}", text).replace('value = "TODO"', f"value = {n}")
    filled = filled.replace("grid = [1, 1, 1]", f"grid = [{n // 256}, 1, 1]").replace(
        "block = [1, 1, 1]", "block = [256, 1, 1]").replace('"clock64"', '"events"')
    path = tmp_path / "stencil.toml"
    path.write_text(filled)
    spec = load_spec(path)
    assert [p.role for p in spec.buffers()] == ["in", "out"]
    assert tomllib.loads(filled)["params"][0]["dtype"] == "f32"
    assert api.measure(spec, backend="static", store=":memory:").cycles > 0
