"""harness.gpu.gate_rows: judging many launches' read-back rows at once may only be faster
than ``gate.check_launch`` row by row, never more lenient. Rows are built as the queued
checks read them back (each buffer and its canary at its slot offset) for kernels of
every dtype family, then corrupted one way at a time: wherever ``check_launch`` fails a
row, ``rows_pass`` must say False; on honest rows it must say True (else it saves nothing)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from harness.gpu import gate, gate_rows
from harness.gpu.queued_checks import _slot_sizes
from harness.kernels.spec import BufferParam, KernelSpec, Tolerance


def spec_of(*params, tolerance=Tolerance(1e-5, 1e-5)) -> KernelSpec:
    return KernelSpec(name="k", entry="k", ptx_path=Path("k.ptx"), grid=(1, 1, 1),
                      block=(1, 1, 1), params=tuple(params), tolerance=tolerance)


SPECS = {
    "f32 in, out": spec_of(BufferParam("a", "f32", 32), BufferParam("b", "f32", 48),
                           BufferParam("c", "f32", 24, role="out")),
    "i32 out": spec_of(BufferParam("x", "i32", 40), BufferParam("y", "i32", 40, role="out")),
    "f16 inout": spec_of(BufferParam("x", "f16", 64), BufferParam("y", "f16", 64, role="inout")),
    "f64 two outs": spec_of(BufferParam("x", "f64", 8), BufferParam("y", "f64", 8, role="out"),
                            BufferParam("z", "f64", 3, role="out")),
    "bf16 out": spec_of(BufferParam("x", "bf16", 16), BufferParam("y", "bf16", 16, role="out")),
}


def values_of(p: BufferParam, rng: np.random.Generator) -> np.ndarray:
    dt = gate._dtype(p.dtype)
    if p.dtype == "bf16":  # bits of bf16 numbers (uint16): the top half of float32s
        return (rng.standard_normal(p.count).astype(np.float32).view(np.uint32) >> 16).astype(dt)
    if dt.kind in "iu":
        return rng.integers(0, 1000, p.count).astype(dt)  # never -1 (all ones), the poison
    return rng.standard_normal(p.count).astype(dt)


def launches(spec, n: int, seed: int = 0):
    """(rows, layout, inputs, references, afters): ``n`` honest launches as read back."""
    rng = np.random.default_rng(seed)
    sizes = _slot_sizes(spec)
    layout = gate_rows.row_layout(spec, sizes)
    rows = np.full((n, sum(sizes)), 0xAB, dtype=np.uint8)  # slot padding: anything
    inputs, references = [], []
    for i in range(n):
        inp = {p.name: values_of(p, rng) for p in spec.buffers() if not p.is_output}
        ref = {p.name: values_of(p, rng) for p in spec.outputs()}
        for p, offset in layout:
            image = gate.with_canary(ref[p.name] if p.is_output else inp[p.name])
            rows[i, offset:offset + image.size] = image
        inputs.append(inp)
        references.append(ref)
    return rows, layout, inputs, references


def afters_of(spec, rows, layout) -> list[dict]:
    return [{p.name: row[offset:offset + p.nbytes + gate.CANARY_BYTES].copy() for p, offset in layout}
            for row in rows]


def all_pass_row_by_row(spec, rows, layout, inputs, references) -> bool:
    return all(gate.check_launch(spec, inp, after, ref)[0]
               for inp, after, ref in zip(inputs, afters_of(spec, rows, layout), references))


@pytest.mark.parametrize("name", sorted(SPECS))
def test_honest_rows_pass_both_ways(name):
    spec = SPECS[name]
    rows, layout, inputs, references = launches(spec, 6)
    assert all_pass_row_by_row(spec, rows, layout, inputs, references)
    assert gate_rows.rows_pass(spec, rows, layout, inputs, references)
    written_only = [None] * len(rows)  # the baseline's judgement: only written
    assert gate_rows.rows_pass(spec, rows, layout, inputs, written_only)


def corruptions(spec, layout, rng: random.Random):
    """(what, function changing one row's bytes in place): each a way a launch goes wrong."""
    def byte(at):
        return lambda row: row.__setitem__(at, row[at] ^ 0x01)

    for p, offset in layout:
        end = offset + p.nbytes
        yield f"canary of {p.name}", byte(end + rng.randrange(gate.CANARY_BYTES))
        yield f"a byte of {p.name}", byte(offset + rng.randrange(p.nbytes))
        if p.is_output:
            dt = gate._dtype(p.dtype)
            k = rng.randrange(p.count)
            poison = np.array([gate._poison_bits(dt)], dtype=gate._UINT[dt.itemsize]).view(np.uint8)
            yield (f"{p.name}[{k}] unwritten",
                   lambda row, at=offset + k * dt.itemsize, b=poison: row.__setitem__(
                       slice(at, at + b.size), b))
            if dt.kind == "f":
                nan = np.array([np.nan], dtype=dt).view(np.uint8)
                yield (f"{p.name}[{k}] NaN", lambda row, at=offset + k * dt.itemsize, b=nan:
                       row.__setitem__(slice(at, at + b.size), b))


@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_pass_is_never_more_lenient_than_check_launch(name):
    spec = SPECS[name]
    rng = random.Random(name)
    tried = failed = 0
    for trial in range(40):
        rows, layout, inputs, references = launches(spec, 4, seed=trial)
        for what, corrupt in corruptions(spec, layout, rng):
            bad = rows.copy()
            corrupt(bad[rng.randrange(len(bad))])
            for refs in (references, [None] * len(bad)):
                if all_pass_row_by_row(spec, bad, layout, inputs, refs):
                    continue  # a change check_launch accepts (a low bit inside the tolerance)
                failed += 1
                assert not gate_rows.rows_pass(spec, bad, layout, inputs, refs), (what, refs[0] is None)
            tried += 1
    assert tried and failed > tried // 2  # the corruptions mostly matter


def test_bf16_within_its_tolerance_is_left_to_check_launch():
    spec = SPECS["bf16 out"]
    rows, layout, inputs, references = launches(spec, 3)
    offset = layout[1][1]
    rows[1, offset] ^= 0x01  # y[0]'s lowest mantissa bit: inside bf16's own rounding
    assert all_pass_row_by_row(spec, rows, layout, inputs, references)
    assert not gate_rows.rows_pass(spec, rows, layout, inputs, references)  # not decoded here


def test_the_poison_where_the_reference_computed_a_nan_is_unwritten():
    spec = SPECS["f32 in, out"]
    rows, layout, inputs, references = launches(spec, 2)
    references[1]["c"][3] = np.nan  # a NaN the baseline computed: not the poison's bits
    c = layout[2][1]
    rows[1, c + 12:c + 16] = np.array([gate.poison_value("f32")]).view(np.uint8)
    assert not gate.check_launch(spec, inputs[1], afters_of(spec, rows, layout)[1], references[1])[0]
    assert not gate_rows.rows_pass(spec, rows, layout, inputs, references)


def test_a_row_of_another_shape_or_count_is_not_passed():
    spec = SPECS["f32 in, out"]
    rows, layout, inputs, references = launches(spec, 3)
    assert not gate_rows.rows_pass(spec, rows[:2], layout, inputs, references)
    assert not gate_rows.rows_pass(spec, rows, layout, inputs, references[:1] + [None, None])
    short = [{**r, "c": r["c"][:-1]} for r in references]
    assert not gate_rows.rows_pass(spec, rows, layout, inputs, short)
