"""The warp_tail gene: which block barriers of a tree reduction it turns into warp barriers,
and, above all, which it must leave alone (a demoted barrier that still orders two warps
would be a race the gate's random inputs may miss).

Besides the suite's reductions, tests/data/unseen/trees holds nvcc output of reductions
written in other styles (a reduce6-like block-size template, a (value, index) argmin) and
a kernel whose barrier every thread depends on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import needs_ptxas
from genomes import ptx
from genomes.genome import apply_genome, parse_inline
from genomes.launch import Launch
from genomes.transforms import NotApplicable, get
from harness.compile import compile_ptx
from harness.kernels.spec import load_spec
from harness.kernels.suite import find_kernel

TREES = Path(__file__).parent / "data" / "unseen" / "trees"
ROWS = Path(__file__).parent / "data" / "unseen" / "rows.ptx"


def _warp_tail(text: str, block=(256, 1, 1), entry: str | None = None) -> tuple[int, str]:
    module = ptx.parse(text)
    changes, _ = get("warp_tail").run_launch(module, {}, Launch.of((64, 1, 1), block, entry))
    return changes, module.render()


def _barriers(text: str) -> list[str]:
    return [line.split()[0] for line in text.splitlines()
            if line.strip().startswith(("bar.sync", "bar.warp.sync"))]


def _reduce_sum() -> str:
    return find_kernel("reduce_sum").ptx_text()


@pytest.mark.parametrize("name", ["reduce_sum", "reduce_max"])
def test_the_last_six_barriers_of_a_256_thread_tree_become_warp_barriers(name):
    changes, out = _warp_tail(find_kernel(name).ptx_text())
    assert changes == 6
    # the barrier after the 64-wide step orders warps 0 and 1: it stays, as do those before
    assert _barriers(out) == ["bar.sync"] * 3 + ["bar.warp.sync"] * 6


@needs_ptxas
def test_the_variant_assembles_and_keeps_one_block_barrier_per_wide_step():
    spec = find_kernel("reduce_sum")
    applied = apply_genome(spec.ptx_text(), parse_inline("warp_tail"), spec.launch)
    assert applied.outcomes[0].status == "applied"
    assert applied.launch == spec.launch
    assert compile_ptx(applied.ptx).ok


@pytest.mark.parametrize("entry, block", [("sum_sq_128", 128), ("argmin_blocks", 256)])
def test_unseen_nvcc_trees(entry, block):
    text = ptx.only_entry((TREES / "trees.ptx").read_text(), entry)
    changes, out = _warp_tail(text, (block, 1, 1))
    assert changes == 6
    assert _barriers(out)[-6:] == ["bar.warp.sync"] * 6
    assert "bar.sync" in _barriers(out)


def test_a_barrier_every_thread_reads_across_stays():
    text = ptx.only_entry((TREES / "trees.ptx").read_text(), "warp_table_scale")
    with pytest.raises(NotApplicable, match="first-warp-only"):
        _warp_tail(text)


def test_a_step_spanning_two_warps_keeps_its_barriers():
    # the 16-wide step widened to 48 threads: the barriers on both of its sides stay
    text = _reduce_sum().replace("setp.gt.u32 \t%p6, %r2, 15;", "setp.gt.u32 \t%p6, %r2, 47;")
    assert text != _reduce_sum()
    changes, out = _warp_tail(text)
    assert changes == 4
    assert _barriers(out) == ["bar.sync"] * 5 + ["bar.warp.sync"] * 4


def test_an_unguarded_access_keeps_its_barriers():
    # every thread stores to shared memory in the 8-wide step's segment: the barriers
    # after the 16-wide and the 8-wide steps stay
    text = _reduce_sum().replace("$L__BB0_14:\n", "$L__BB0_14:\n\tst.shared.f32 \t[%r5], %f21;\n", 1)
    changes, out = _warp_tail(text)
    assert changes == 4
    assert _barriers(out) == ["bar.sync"] * 3 + ["bar.warp.sync"] + ["bar.sync"] * 2 \
        + ["bar.warp.sync"] * 3


def test_a_guard_reading_another_register_is_not_trusted():
    # %r3 is the global index, not %tid.x: "r3 <= 15" says nothing about the warp
    text = _reduce_sum().replace("setp.gt.u32 \t%p6, %r2, 15;", "setp.gt.u32 \t%p6, %r3, 15;")
    changes, _ = _warp_tail(text)
    assert changes == 4


def test_a_jump_into_a_guarded_step_is_seen():
    # threads that skipped the 4-wide step's guard may jump back into its body
    text = _reduce_sum().replace(
        "\tld.shared.f32 \t%f22, [%r5];", "$L__in:\n\tld.shared.f32 \t%f22, [%r5];", 1)
    text = text.replace("$L__BB0_16:\n", "$L__BB0_16:\n\t@%p1 bra \t$L__in;\n", 1)
    changes, out = _warp_tail(text)
    assert changes < 6
    assert "bar.sync" in _barriers(out)[-4:-1]


def test_a_predicated_store_of_thread_zero_counts_as_the_first_warp():
    text = _reduce_sum()
    assert "setp.ne.s32" in text  # the final `if (tid == 0) partial[...] = s[0]`
    changes, _ = _warp_tail(text)
    assert changes == 6


@pytest.mark.parametrize("block, why", [((128, 2, 1), "one-dimensional"),
                                        ((48, 1, 1), "whole warps")])
def test_blocks_where_tid_x_below_32_is_not_one_warp(block, why):
    with pytest.raises(NotApplicable, match=why):
        _warp_tail(_reduce_sum(), block)


def test_a_barrier_inside_a_loop_is_out_of_reach():
    # row_max's tree runs `for (s = blockDim.x / 2; s > 0; s >>= 1)`: a loop around the barrier
    text = ptx.only_entry(ROWS.read_text(), "row_max")
    with pytest.raises(NotApplicable, match="crosses a barrier"):
        _warp_tail(text)


def test_a_counted_barrier_is_out_of_reach():
    text = _reduce_sum().replace("bar.sync \t0;", "bar.sync \t0, 256;", 1)
    with pytest.raises(NotApplicable, match="bar.sync 0"):
        _warp_tail(text)


def test_unseen_specs_load():
    for name in ("sum_sq_128", "argmin_blocks"):
        spec = load_spec(TREES / f"{name}.toml")
        applied = apply_genome(spec.ptx_text(), parse_inline("warp_tail"), spec.launch)
        assert applied.outcomes[0].status == "applied", applied.outcomes[0].detail
