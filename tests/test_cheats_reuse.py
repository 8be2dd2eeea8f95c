"""The result-reuse cheats' CPU side (cheats_reuse): every maker edits its suite
kernel's real PTX and assembles with ptxas; the module-state ones declare a ``.global``
the baseline lacks (and, once ``harness.hidden_state`` exists, exactly they are rejected by
it); the skip branches land on the final ``ret``; the output marker stays within the
tolerance; ``with_tail`` lengthens only the outputs. The GPU verdicts (``expect``) are
checked where the worker runs.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import cheats_reuse as cr
from harness.gpu import gate
from harness import record
from cheats import CheatError
from cheats_reuse import REUSE_CHEATS, REUSE_LEGIT, ReuseCheat, with_tail
from harness.compile import compile_ptx
from harness.kernels.spec import BufferParam
from harness.kernels.suite import find_kernel, suite_names

from conftest import needs_ptxas

ALL = REUSE_CHEATS + REUSE_LEGIT
_EXPECTS = {cr.STATIC, cr.WORKS, record.UNWRITTEN, record.OUT_OF_BOUNDS, record.WRONG}
_GLOBAL = re.compile(r"^\s*\.global\s[^;]*?(\w+)(?:\[\d*\])?(?:\s*=[^;]*)?;", re.MULTILINE)


def _ids(table):
    return [c.name for c in table]


def _globals(ptx: str) -> set[str]:
    return set(_GLOBAL.findall(ptx))


def _variant(cheat: ReuseCheat) -> tuple[str, str]:
    base = find_kernel(cheat.kernel).ptx_text()
    return base, cheat.make(base)


# ---------------------------------------------------------------------- the table


def test_the_table_is_well_formed():
    assert len({c.name for c in ALL}) == len(ALL)
    for c in ALL:
        assert c.kernel in suite_names(), c
        assert c.make.__doc__, f"{c.name}: the maker's docstring says what it does and why"
    assert {c.expect for c in REUSE_CHEATS} <= _EXPECTS
    assert {c.expect for c in REUSE_LEGIT} == {record.OK}
    assert not any(c.hidden_state for c in REUSE_LEGIT)
    by = {c.name: c for c in REUSE_CHEATS}
    assert by["state past end (relu)"].detail == "outside"
    assert by["output marker (gelu)"].detail == "pre-filled"
    # every channel but the output marker and the tail on a one-thread and a many-thread kernel
    for family in ("memo pointer", "memo values", "memo count", "state past end", "skip if written"):
        kernels = {c.kernel for c in REUSE_CHEATS if c.name.startswith(family)}
        assert kernels == {"gemm_tile_4x4x4", "relu"}, family


@needs_ptxas
@pytest.mark.parametrize("cheat", ALL, ids=_ids(ALL))
def test_every_variant_edits_its_kernel_and_assembles(cheat):
    base, ptx = _variant(cheat)
    assert ptx != base, f"{cheat.name} changes nothing"
    result = compile_ptx(ptx)
    assert result.ok, f"{cheat.name}: {result.error}"


@pytest.mark.parametrize("cheat", ALL, ids=_ids(ALL))
def test_a_maker_fails_loudly_on_ptx_it_does_not_know(cheat):
    with pytest.raises(CheatError):
        cheat.make(".version 9.0\n.target sm_90\n.address_size 64\n")


def test_module_state_is_declared_exactly_where_the_static_check_must_look():
    for c in ALL:
        base, ptx = _variant(c)
        new = _globals(ptx) - _globals(base)
        if c.hidden_state:
            assert new, f"{c.name}: no .global the baseline lacks"
        elif c.name == "constant table":
            assert new == {"evo_scale"}
            assert not re.search(r"(st|atom|red)\.global[^;]*\[evo_scale", ptx), "the table is read only"
        else:
            assert not new, f"{c.name}: keeps no module state, yet declares {new}"


def test_the_static_check_rejects_exactly_the_module_state_cheats():
    try:
        from harness.hidden_state import hidden_state
    except ImportError:
        pytest.skip("harness.hidden_state is not written yet")
    for c in ALL:
        base, ptx = _variant(c)
        found = hidden_state(ptx, base)
        assert (found is not None) == c.hidden_state, f"{c.name}: hidden_state said {found!r}"


# ---------------------------------------------------------------------- the PTX read


def _new_branches(base: str, ptx: str) -> list[str]:
    old = set(base.splitlines())
    return [m.group(1) for line in ptx.splitlines() if line not in old
            for m in [re.search(r"\bbra\s+(\$L__\w+);", line)] if m]


@pytest.mark.parametrize("cheat", REUSE_CHEATS, ids=_ids(REUSE_CHEATS))
def test_skip_branches_land_on_the_final_ret(cheat):
    base, ptx = _variant(cheat)
    targets = _new_branches(base, ptx)
    assert targets, f"{cheat.name}: no skip branch"
    body = ptx[ptx.index(".entry"):]
    last_ret = body.rindex("ret;")
    for label in targets:
        at = body.index(f"\n{label}:")
        assert body[at:].split("\n", 2)[2].strip().startswith("ret;"), label
        assert body.index("ret;", at) == last_ret, f"{label} is not the exit every path reaches"


@pytest.mark.parametrize("cheat", [c for c in REUSE_CHEATS if "bar.sync" in c.make(
    find_kernel(c.kernel).ptx_text())], ids=lambda c: c.name)
def test_a_block_reads_its_slot_before_any_thread_writes_it(cheat):
    """One slot per block, loaded before the barrier and written after it, and the
    barrier before the bounds check, so every thread of the block reaches it."""
    base, ptx = _variant(cheat)
    bar = ptx.index("bar.sync")
    load = ptx.index("ld.volatile.global")
    write = min(ptx.index(s) for s in ("st.global.u64", "st.global.f32", "atom.global") if s in ptx)
    assert load < bar < write
    guard = re.search(r"@%p\d+ bra", ptx)
    assert guard is None or bar < guard.start()
    assert "%ctaid.x" in ptx[:bar]


def test_the_tail_slots_fit_the_tail():
    for c in REUSE_CHEATS:
        if not c.tail:
            continue
        spec, base = c.spec(), find_kernel(c.kernel)
        n = base.param("n").value
        y = base.outputs()[-1].name
        assert spec.param(y).count - n >= 2 * base.blocks + 2  # n rounded up to even, u64 a block
        assert cr.SLOTS >= base.blocks


def test_the_output_marker_stays_within_the_tolerance():
    rng = np.random.default_rng(5)
    want = np.concatenate([rng.normal(0, 2, 4096), rng.normal(0, 1e3, 64), [0.0, -0.0, 1e-30]])
    want = want.astype(np.float32)
    key = rng.integers(0, 16, want.size, dtype=np.uint32)
    marked = ((want.view(np.uint32) & np.uint32(0xFFFFFFF0)) | key).view(np.float32)
    for name in ("gelu", "gemm_tile_4x4x4"):
        spec = find_kernel(name)
        out = spec.outputs()[0].name
        assert gate.compare({out: marked}, {out: want}, spec) == (True, record.OK), name
    relu = find_kernel("relu")  # exact: no slack to hide a marker in
    assert not gate.compare({"y": marked}, {"y": want}, relu)[0]
    poison = gate.poison_value(np.float32)  # the poison is a NaN: never taken for a marked output
    assert np.isnan(poison)


# ---------------------------------------------------------------------- with_tail


def test_with_tail_lengthens_only_the_outputs():
    for name in ("saxpy", "relu"):
        spec = find_kernel(name)
        longer = with_tail(spec, 1024)
        assert longer.spec_path == spec.spec_path and longer.entry == spec.entry
        for old, new in zip(spec.params, longer.params):
            assert type(old) is type(new) and old.name == new.name
            if isinstance(old, BufferParam) and old.is_output:
                assert new.count == old.count + 1024 and new.nbytes == old.nbytes + 4096
                assert new.role == old.role and new.fill == old.fill
            else:
                assert new == old
        assert longer.param("n").value == spec.param("n").value
        assert [b.name for b in longer.buffers()] == [b.name for b in spec.buffers()]
        assert longer.bytes_written == spec.bytes_written + 4096 * len(spec.outputs())
        assert spec.param("y").count == spec.param("n").value  # the suite spec is untouched
    relu = find_kernel("relu")
    assert with_tail(relu).param("y").count == relu.param("y").count + 1024
    by = {c.name: c for c in REUSE_CHEATS}
    assert by["tail state (saxpy)"].spec().param("y").count == 1048576 + cr.TAIL
    assert by["memo pointer (relu)"].spec() == relu
