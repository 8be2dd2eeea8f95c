"""If-conversion (genomes.if_convert): which short forward branches become predication,
how a nested triangle's guards combine, and which branches are left alone."""

from __future__ import annotations

from conftest import needs_ptxas
from genomes import ptx
from genomes.if_convert import if_convert
from harness.compile import compile_ptx

HEADER = """.version 8.0
.target sm_90
.address_size 64
"""


def _entry(name: str) -> str:
    """A kernel's start: a bounds check on %tid.x to $L_exit, then %f1 = x[tid]."""
    return HEADER + f"""
.visible .entry {name}(.param .u64 x, .param .u32 n)
{{
\t.reg .pred \t%p<5>;
\t.reg .b32 \t%r<4>;
\t.reg .f32 \t%f<8>;
\t.reg .b64 \t%rd<4>;
\tld.param.u64 \t%rd1, [x];
\tld.param.u32 \t%r1, [n];
\tmov.u32 \t%r2, %tid.x;
\tsetp.ge.u32 \t%p1, %r2, %r1;
\t@%p1 bra \t$L_exit;
\tcvta.to.global.u64 \t%rd2, %rd1;
\tmul.wide.u32 \t%rd3, %r2, 4;
\tadd.s64 \t%rd2, %rd2, %rd3;
\tld.global.f32 \t%f1, [%rd2];"""

# a bounds check to an exit block, a nested triangle (the inner one under %p3 inside the
# outer one under %p2), two branches that skip to one label, an empty triangle, and a block
# that writes its own branch condition
KERNEL = _entry("k") + """
\tmov.f32 \t%f2, %f1;
\tsetp.gt.f32 \t%p2, %f1, 0f3F800000;
\tsetp.gt.f32 \t%p3, %f1, 0f40000000;
\t@%p2 bra \t$L_outer;
\tmul.f32 \t%f2, %f1, %f1;
\t@!%p3 bra \t$L_inner;
\tadd.f32 \t%f2, %f2, %f1;
$L_inner:
\tsub.f32 \t%f2, %f2, 0f3F800000;
$L_outer:
\tsetp.lt.f32 \t%p4, %f2, 0f00000000;
\t@%p4 bra \t$L_two;
\tneg.f32 \t%f2, %f2;
\t@%p3 bra \t$L_two;
\tabs.f32 \t%f2, %f2;
$L_two:
\t@%p4 bra \t$L_empty;
$L_empty:
\t@%p4 bra \t$L_writes;
\tsetp.lt.f32 \t%p4, %f2, 0f3F000000;
$L_writes:
\tst.global.f32 \t[%rd2], %f2;
$L_exit:
\tret;
}
"""


def _converted(keep=frozenset({"$L_exit"})) -> tuple[int, str]:
    module = ptx.parse(KERNEL)
    done = if_convert(module.functions[0], 0, keep)
    return done, module.render()


def _lines(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines()]


def test_a_nested_triangle_becomes_predication_with_the_guards_and_ed():
    done, text = _converted()
    lines = _lines(text)
    assert done == 4  # the inner triangle, the outer one, and the two to $L_two
    assert "$L_inner:" not in text and "$L_outer:" not in text
    # the inner triangle: skipped unless %p3 (the branch was on !%p3)
    # then, inside the outer one (run where !%p2), guarded by (!%p2 and %p3)
    assert "@!%p2 mul.f32 %f2, %f1, %f1;" in lines
    assert "@!%p2 sub.f32 %f2, %f2, 0f3F800000;" in lines
    assert "not.pred %evif_p0, %p2;" in lines
    assert "and.pred %evif_p1, %evif_p0, %p3;" in lines
    assert "@%evif_p1 add.f32 %f2, %f2, %f1;" in lines
    assert ".reg .pred %evif_p<5>;" in lines


def test_branches_it_must_not_convert_are_kept():
    done, text = _converted()
    lines = _lines(text)
    assert "@%p1 bra $L_exit;" in lines  # the exit label is in keep
    assert "@%p4 bra $L_empty;" in lines  # nothing skipped: nothing to gain
    # the skipped line writes %p4: a guard read after it would see the new value
    assert "@%p4 bra $L_writes;" in lines
    assert "setp.lt.f32 %p4, %f2, 0f3F000000;" in lines


def test_two_branches_that_skip_to_one_label_convert_last_first():
    # if (p4) goto two; neg; if (p3) goto two; abs; two:  ->  abs runs where neither jumped
    _, text = _converted()
    lines = _lines(text)
    assert "$L_two:" not in text and "@!%p4 neg.f32 %f2, %f2;" in lines
    at = lines.index("@!%p4 neg.f32 %f2, %f2;")
    assert lines[at - 1] == "not.pred %evif_p2, %p4;"
    assert lines[at + 1:at + 4] == ["not.pred %evif_p3, %p3;",
                                    "and.pred %evif_p4, %evif_p2, %evif_p3;",
                                    "@%evif_p4 abs.f32 %f2, %f2;"]


def test_a_label_other_branches_still_reach_stays():
    # only the second of two branches to $L_two can go (the first skips a branch): after
    # it, the first still jumps to $L_two
    text = KERNEL.replace("\tneg.f32 \t%f2, %f2;\n", "\tneg.f32 \t%f2, %f2;\n\tbar.sync \t0;\n")
    module = ptx.parse(text)
    if_convert(module.functions[0], 0, frozenset({"$L_exit"}))
    lines = _lines(module.render())
    assert "@%p4 bra $L_two;" in lines and "$L_two:" in lines
    assert "@!%p3 abs.f32 %f2, %f2;" in lines


def test_the_exit_branch_is_kept_even_without_keep_as_its_block_holds_labels():
    done, text = _converted(keep=frozenset())
    assert done == 4 and "@%p1 bra $L_exit;" in _lines(text)


@needs_ptxas
def test_the_converted_kernel_assembles():
    _, text = _converted()
    result = compile_ptx(text)
    assert result.ok, result.error


# ``if (v != v) { y[i] = 0; return; } y[i] = v * 2;`` as nvcc lays it out: a diamond whose
# sides meet at the exit block, which the bounds check reaches too
DIAMOND = _entry("d") + """
\tsetp.nan.f32 \t%p2, %f1, %f1;
\tsetp.gt.f32 \t%p3, %f1, 0f00000000;
\t@%p2 bra \t$L_nan;
\tmul.f32 \t%f2, %f1, 0f40000000;
\t@%p3 add.f32 \t%f2, %f2, 0f3F800000;
\tst.global.f32 \t[%rd2], %f2;
\tbra.uni \t$L_exit;

$L_nan:
\tmov.u32 \t%r3, 0;
\tst.global.u32 \t[%rd2], %r3;

$L_exit:
\tret;
}
"""


def test_a_diamond_becomes_both_sides_predicated_and_its_join_stays():
    module = ptx.parse(DIAMOND)
    assert if_convert(module.functions[0], 0, frozenset({"$L_exit"})) == 1
    text = module.render()
    lines = _lines(text)
    assert "$L_nan:" not in text and "bra.uni $L_exit;" not in lines
    assert "@%p1 bra $L_exit;" in lines and "$L_exit:" in lines  # the join stays
    assert "@!%p2 mul.f32 %f2, %f1, 0f40000000;" in lines  # the fall-through side
    assert "@%p2 mov.u32 %r3, 0;" in lines  # the jumped-to side
    # both sides end storing to [%rd2]: one select, one unguarded store after both
    at = lines.index("$L_exit:")
    assert lines[at - 3:at] == ["selp.b32 %evif_w0, %r3, %f2, %p2;",
                                "st.global.b32 [%rd2], %evif_w0;", ""]
    assert not [ln for ln in lines if ln.startswith("@") and " st." in ln]
    # the line guarded on its own runs where both guards hold
    assert "not.pred %evif_p0, %p2;" in lines and "and.pred %evif_p1, %evif_p0, %p3;" in lines
    assert "@%evif_p1 add.f32 %f2, %f2, 0f3F800000;" in lines


def test_stores_the_sides_do_not_share_stay_guarded():
    cases = {  # the other side stores elsewhere / writes the value after storing it
        "another address": DIAMOND.replace("st.global.u32 \t[%rd2], %r3;",
                                           "st.global.u32 \t[%rd3], %r3;"),
        "value written after": DIAMOND.replace(
            "st.global.u32 \t[%rd2], %r3;", "st.global.u32 \t[%rd2], %r3;\n\tmov.u32 \t%r3, 1;"),
        "a wider store": DIAMOND.replace("mov.u32 \t%r3, 0;\n\tst.global.u32 \t[%rd2], %r3;",
                                         "mov.u64 \t%rd3, 0;\n\tst.global.u64 \t[%rd2], %rd3;"),
    }
    for why, text in cases.items():
        assert text != DIAMOND, why
        module = ptx.parse(text)
        assert if_convert(module.functions[0], 0, frozenset({"$L_exit"})) == 1, why
        lines = _lines(module.render())
        assert "@!%p2 st.global.f32 [%rd2], %f2;" in lines, why
        assert not [ln for ln in lines if ln.startswith("selp")], why


def test_a_diamond_whose_side_writes_the_condition_is_kept():
    text = DIAMOND.replace("mov.u32 \t%r3, 0;", "setp.lt.f32 \t%p2, %f1, 0f00000000;")
    module = ptx.parse(text)
    assert if_convert(module.functions[0], 0, frozenset({"$L_exit"})) == 0


@needs_ptxas
def test_the_converted_diamond_assembles():
    module = ptx.parse(DIAMOND)
    if_convert(module.functions[0], 0, frozenset({"$L_exit"}))
    result = compile_ptx(module.render())
    assert result.ok, result.error
