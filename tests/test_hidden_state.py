"""harness.hidden_state: a variant may not write module-scope .global memory that the
baseline never writes (the result-reuse hole). Variants are the suite's real nvcc/Triton
PTX with a declaration after `.address_size` and instructions before the entry's `ret;`;
some are assembled with the real ptxas to show that they are valid PTX."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from harness import record
from harness.compile import compile_ptx
from harness.hidden_state import hidden_state, module_globals
from harness.kernels.suite import find_kernel

from conftest import needs_ptxas

KERNELS = ("relu", "gemm_tile_4x4x4", "saxpy", "triton_add")


def ptx(name: str) -> str:
    return find_kernel(name).ptx_text()


def edit(base: str, decl: str = "", body: str = "") -> str:
    """``decl`` after the `.address_size` line, ``body`` before the first `ret;`."""
    assert ".address_size 64\n" in base and "\tret;" in base
    text = base.replace(".address_size 64\n", f".address_size 64\n{decl}\n", 1) if decl else base
    return text.replace("\tret;", f"{body}\n\tret;", 1) if body else text


def line_of(text: str, line: int) -> str:
    return text.splitlines()[line - 1]


def line_no(text: str, snippet: str) -> int:
    """The 1-based line of ``text`` that holds ``snippet`` (exactly one does)."""
    found = [i for i, line in enumerate(text.splitlines(), 1) if snippet in line]
    assert len(found) == 1, (snippet, found)
    return found[0]


def check_reason(reason: str | None, text: str, name: str, insn: str, via: str = "") -> None:
    """The reason names ``name`` and a line of ``text`` that holds ``insn``; with ``via``, the
    address was derived from the variable's on the line of ``text`` that holds ``via``."""
    assert reason is not None and reason.startswith(record.HIDDEN_STATE + ": line "), reason
    assert re.search(rf"module variable {re.escape(name)}[, ]", reason), reason
    if via:
        assert f"derived from it (line {line_no(text, via)}), which the baseline" in reason, reason
    else:
        assert f"module variable {name}, which the baseline never writes" in reason, reason
    line = int(reason.split()[3])
    assert insn in line_of(text, line), (reason, line_of(text, line))
    assert " ".join(insn.split()) in reason.split("`")[1], reason


MEMO = ".global .align 8 .u64 evo_memo_ptr;"
STORE = "\tst.global.u64 \t[evo_memo_ptr], %rd1;"


@pytest.mark.parametrize("name", KERNELS)
def test_baseline_against_itself(name):
    base = ptx(name)
    assert hidden_state(base, base) is None
    assert module_globals(base) == {}


@pytest.mark.parametrize("name", ["relu", "gemm_tile_4x4x4", "saxpy"])
def test_memo_pointer_store_is_rejected(name):
    base = ptx(name)
    variant = edit(base, MEMO, STORE)
    reason = hidden_state(variant, base)
    check_reason(reason, variant, "evo_memo_ptr", "st.global.u64 \t[evo_memo_ptr], %rd1;")
    assert "writes module variable evo_memo_ptr, which the baseline never writes" in reason
    assert "skip work" in reason
    assert module_globals(variant) == {"evo_memo_ptr": 13}
    assert line_of(variant, 13) == MEMO


@needs_ptxas
def test_hand_made_variants_assemble():
    base = ptx("relu")
    variants = [
        edit(base, MEMO, STORE),
        edit(base, ".visible .global .align 4 .u32 cnt;",
             "\t@%p1 red.global.add.u32 \t[cnt], 1;"),
        edit(base, ".global .align 4 .b8 v[8];", "\tatom.global.exch.b32 \t%r3, [v+4], %r2;"),
        edit(base, ".global .align 8 .u64 memo;", "\tmov.u64 \t%rd1, memo;\n\tst.global.u64 \t[%rd1+8], %rd2;"),
        edit(base, ".global .align 4 .b8 tab[16] = {0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, "
             "0, 0, 128, 64};", "\tld.global.f32 \t%f1, [tab+4];"),
        edit(ptx("triton_add"), ".global .align 4 .u32 memo;",
             "\t@%p1 st.global.b32 [ memo + 0 ], { %r17 };"),
        edit(base, ".global .align 8 .u64 memo;\n.global .align 8 .u64 p[2] = {memo, generic(memo)+8};",
             "\tld.global.u64 \t%rd1, [p];"),
        edit(base, body="\t{\n\t.global .align 4 .u32 fx;\n\tst.global.u32 \t[fx], %r1;\n\t}"),
    ]
    for text in variants:
        result = compile_ptx(text)
        assert result.ok, result.error


def test_predicated_red_counter_is_rejected():
    base = ptx("relu")
    variant = edit(base, ".visible .global .align 4 .u32 cnt;", "\t@%p1 red.global.add.u32 \t[cnt], 1;")
    check_reason(hidden_state(variant, base), variant, "cnt", "@%p1 red.global.add.u32 \t[cnt], 1;")


def test_atom_exch_with_offset_is_rejected():
    base = ptx("saxpy")
    variant = edit(base, ".global .align 4 .b8 v[8];", "\tatom.global.exch.b32 \t%r3, [v+4], %r2;")
    reason = hidden_state(variant, base)
    check_reason(reason, variant, "v", "atom.global.exch.b32 \t%r3, [v+4], %r2;")
    assert "writes module variable v," in reason


def test_taking_the_address_alone_is_no_write():
    """``mov``/``cvta``/``add`` of the address is no write; a load through it is none either;
    a store through it is, named at the store with the line the address came from."""
    base = ptx("relu")
    for insn in ("\tmov.u64 \t%rd1, memo;", "\tcvta.global.u64 \t%rd1, memo;", "\tadd.u64 \t%rd1, memo, 8;"):
        decl = ".global .align 8 .u64 memo;"
        assert hidden_state(edit(base, decl, insn), base) is None
        assert hidden_state(edit(base, decl, insn + "\n\tld.u64 \t%rd2, [%rd1+8];"), base) is None
        variant = edit(base, decl, insn + "\n\tst.u64 \t[%rd1], %rd2;")
        reason = hidden_state(variant, base)
        check_reason(reason, variant, "memo", "st.u64 \t[%rd1], %rd2;", via=insn.strip())
        assert "writes module variable memo through an address derived from it" in reason


def test_address_in_another_initializer_is_rejected():
    base = ptx("relu")
    decl = ".global .align 8 .u64 memo;\n.const .align 8 .u64 where = generic(memo);"
    reason = hidden_state(edit(base, decl), base)
    assert reason is not None and "takes the address of module variable memo" in reason
    assert "line 14 " in reason


def test_read_only_table_is_allowed():
    base = ptx("relu")
    table = ".global .align 4 .b8 tab[16] = {0, 0, 128, 63, 0, 0, 0, 64,\n\t0, 0, 64, 64, 0, 0, 128, 64};"
    body = ("\tld.global.f32 \t%f1, [tab+4];\n\tld.volatile.global.f32 %f2, [tab];\n"
            "\tld.global.nc.f32 %f2, [ tab + 8 ];\n\tldu.global.f32 %f2, [tab+12];\n"
            "\tprefetch.global.L2 [tab];\n\tprefetchu.L1 [tab+4];")
    variant = edit(base, table, body)
    assert module_globals(variant) == {"tab": 13}
    assert hidden_state(variant, base) is None


def test_const_shared_and_local_are_allowed():
    base = ptx("relu")
    decl = (".const .align 4 .b8 ctab[16] = {0};\n.shared .align 4 .u32 sh;\n"
            ".local .align 4 .u32 lo;")
    body = "\tmov.u64 \t%rd1, ctab;\n\tst.shared.u32 \t[sh], %r1;\n\tst.local.u32 \t[lo], %r1;"
    assert hidden_state(edit(base, decl, body), base) is None


def test_variable_the_baseline_writes_stays_allowed():
    relu = ptx("relu")
    decl = ".visible .global .align 4 .u32 counter;"
    base = edit(relu, decl, "\tred.global.add.u32 \t[counter], 1;")
    variant = edit(relu, decl, "\tatom.global.add.u32 \t%r3, [counter], 1;\n\tst.global.u32 [counter], %r3;")
    assert hidden_state(variant, base) is None
    # ... but a second, new variable in the same variant is still caught
    both = edit(relu, decl + "\n" + MEMO, "\tred.global.add.u32 \t[counter], 1;\n" + STORE)
    check_reason(hidden_state(both, base), both, "evo_memo_ptr", "[evo_memo_ptr]")


def test_prefix_names_are_attributed_correctly():
    base = ptx("relu")
    decl = ".global .align 4 .u32 memo;\n.global .align 4 .u32 memo2;"
    variant = edit(base, decl, "\tld.global.u32 \t%r3, [memo];\n\tst.global.u32 \t[memo2], %r3;")
    check_reason(hidden_state(variant, base), variant, "memo2", "st.global.u32 \t[memo2], %r3;")
    # memo written in the baseline does not excuse memo2
    base2 = edit(base, decl, "\tst.global.u32 \t[memo], %r1;")
    assert "module variable memo2," in hidden_state(variant, base2)
    # memo only read; a register-like name that extends it is no use of memo
    quiet = edit(base, ".global .align 4 .u32 memo;", "\tld.global.u32 \t%memo2, [memo];")
    assert hidden_state(quiet, base) is None


def test_comments_are_ignored():
    base = ptx("relu")
    body = ("\t// st.global.u32 [memo], %r1;\n\t/* st.global.u32 [memo], %r1;\n"
            "\t   mov.u64 %rd1, memo; */\n\tld.global.u32 \t%r3, [memo]; // st.global [memo]")
    variant = edit(base, ".global .align 4 .u32 memo; // st.global [memo]", body)
    assert hidden_state(variant, base) is None
    # a block comment before the store must not shift the reported line
    variant = edit(base, "/* one\n two\n three */ .global .align 4 .u32 memo;",
                   "\tst.global.u32 [memo], %r1;")
    check_reason(hidden_state(variant, base), variant, "memo", "st.global.u32 [memo], %r1;")


def test_triton_spacing_and_vector_operands():
    base = ptx("triton_add")
    insn = "@%p1 st.global.b32 [ memo + 0 ], { %r17 };"
    variant = edit(base, ".global .align 4 .u32 memo;", "\t" + insn)
    check_reason(hidden_state(variant, base), variant, "memo", insn)
    reads = edit(base, ".global .align 16 .b8 memo[16];",
                 "\t@%p1 ld.global.v2.b32 { %r17, %r18 }, [ memo + 0 ];")
    assert hidden_state(reads, base) is None


def test_cp_async_source_read_destination_written():
    base = ptx("relu")
    decl = ".global .align 16 .b8 g[16];\n.shared .align 16 .b8 s[16];"
    assert hidden_state(edit(base, decl, "\tcp.async.ca.shared.global [s], [g], 16;"), base) is None
    variant = edit(base, decl, "\tcp.async.bulk.global.shared::cta.bulk_group [g], [s], 16;")
    check_reason(hidden_state(variant, base), variant, "g", "[g], [s], 16;")


def test_first_offending_line_extern_and_inline_block():
    base = ptx("relu")
    decl = ".extern .global .align 4 .u32 ext;\n.weak .global .align 4 .u32 w;"
    body = "\t{\n\t.reg .b32 t;\n\tst.global.u32 [w], %r1;\n\t}\n\tst.global.u32 [ext], %r1;"
    variant = edit(base, decl, body)
    assert module_globals(variant) == {"ext": 13, "w": 14}
    check_reason(hidden_state(variant, base), variant, "w", "st.global.u32 [w], %r1;")


def test_large_ptx_is_fast():
    base = ptx("gemm_tile_4x4x4")
    head, _, tail = base.partition("\tret;")
    loads = "".join(f"\tld.global.f32 %f1, [%rd4+{i % 64}]; // load {i}\n" for i in range(30000))
    big_base = head + loads + "\tret;" + tail
    variant = edit(big_base, MEMO, STORE)
    assert len(variant) > 900_000
    t0 = time.perf_counter()
    assert hidden_state(big_base, big_base) is None
    assert "evo_memo_ptr" in hidden_state(variant, big_base)
    assert time.perf_counter() - t0 < 1.0
    # an address taken: the taint analysis walks the whole function, loads skipped cheaply
    seed = "\tmov.u64 \t%rd11, evo_memo_ptr;\n\tadd.s64 \t%rd12, %rd11, 8;\n"
    reads = edit(big_base, MEMO, seed + "\tld.global.u64 \t%rd13, [%rd12];")
    writes = edit(big_base, MEMO, seed + "\tst.global.u64 \t[%rd12], %rd13;")
    t0 = time.perf_counter()
    assert hidden_state(reads, big_base) is None
    assert "through an address derived from it" in hidden_state(writes, big_base)
    assert time.perf_counter() - t0 < 1.5


def test_declaration_lists_and_address_tables():
    base = ptx("relu")
    decl = ".global .align 4 .u32 a = 1, b[2] = {1, 2}, c;"
    assert module_globals(edit(base, decl)) == {"a": 13, "b": 13, "c": 13}
    variant = edit(base, decl, "\tld.global.u32 \t%r3, [a];\n\tld.global.u32 \t%r3, [b+4];\n"
                   "\tst.global.u32 \t[c], %r3;")
    check_reason(hidden_state(variant, base), variant, "c", "st.global.u32 \t[c], %r3;")
    # a table of addresses hands out memo's address, which a function may then store through
    decl = ".global .align 8 .u64 memo;\n.global .align 8 .u64 p[2] = {memo, generic(memo)+8};"
    variant = edit(base, decl, "\tld.global.u64 \t%rd1, [p];")
    reason = hidden_state(variant, base)
    check_reason(reason, variant, "memo", ".global .align 8 .u64 p[2] = {memo, generic(memo)+8};")
    assert "takes the address of module variable memo" in reason


def test_global_declared_inside_a_function_counts():
    base = ptx("relu")
    body = "\t{\n\t.global .align 4 .u32 fx;\n\tst.global.u32 \t[fx], %r1;\n\t}"
    variant = edit(base, body=body)
    check_reason(hidden_state(variant, base), variant, "fx", "st.global.u32 \t[fx], %r1;")


# ---------------------------------------------------------------------- derived addresses

AXPY = (Path(__file__).parent / "data" / "code_key" / "helper_axpy.ptx").read_text()
TABLE_DECL = (".global .align 4 .b8 evo_table_a[16] = {0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, "
              "0, 0, 128, 64};\n")
TABLE_READ = ("\tand.b64  \t%rd8, %rd5, 12;\n\tmov.u64 \t%rd9, evo_table_a;\n"
              "\tadd.s64 \t%rd10, %rd9, %rd8;\n\tld.global.f32 \t%f4, [%rd10];\n\tmul.f32 \t%f5, %f3, %f4;\n")
AXPY_STORE = "\tst.global.f32 \t[%rd7], %f5;\n"
SEED = "mov.u64 \t%rd9, evo_table_a;"


def axpy(extra: str = "", old: str = AXPY_STORE) -> str:
    """helper_axpy.ptx (nvcc 13.0) with ``extra`` after ``old`` (its output store)."""
    assert AXPY.count(old) == 1 and AXPY.count(TABLE_READ) == 1 and AXPY.count(TABLE_DECL) == 1
    return AXPY.replace(old, old + extra)


AXPY_BASE = axpy().replace(TABLE_DECL, "").replace(TABLE_READ, "\tmov.f32 \t%f5, %f3;\n")


def test_nvcc_indexed_table_read_is_allowed():
    """nvcc reads an initialized table by index: mov of its address, add, ld through it."""
    assert module_globals(AXPY) == {"evo_table_a": 13, "evo_table_b": 14}
    assert "evo_table_a" not in AXPY_BASE
    assert hidden_state(AXPY, AXPY_BASE) is None
    assert hidden_state(AXPY, AXPY) is None


def test_store_through_the_tables_derived_address_is_rejected():
    variant = axpy("\tst.global.f32 \t[%rd10], %f5;\n")
    for base in (AXPY_BASE, AXPY):  # the baseline only reads it: no excuse
        reason = hidden_state(variant, base)
        check_reason(reason, variant, "evo_table_a", "st.global.f32 \t[%rd10], %f5;", via=SEED)
        assert reason.startswith(f"{record.HIDDEN_STATE}: line 138 `st.global.f32 [%rd10], %f5;` writes "
                                 "module variable evo_table_a through an address derived from it (line 133), "
                                 "which the baseline never writes"), reason
    # a baseline that itself writes the table through a derived address allows it
    assert hidden_state(variant, variant) is None


def test_generic_store_after_cvta_is_rejected_generic_load_is_not():
    base = ptx("relu")
    decl, cvta = ".global .align 4 .u32 memo;", "\tcvta.global.u64 \t%rd0, memo;"
    assert hidden_state(edit(base, decl, cvta + "\n\tld.u32 \t%r3, [%rd0];"), base) is None
    variant = edit(base, decl, cvta + "\n\tst.u32 \t[%rd0], %r3;")
    check_reason(hidden_state(variant, base), variant, "memo", "st.u32 \t[%rd0], %r3;", via=cvta.strip())


def test_address_stored_to_memory_is_rejected():
    variant = axpy("\tst.global.u64 \t[%rd7], %rd9;\n")
    reason = hidden_state(variant, AXPY)
    check_reason(reason, variant, "evo_table_a", "st.global.u64 \t[%rd7], %rd9;", via=SEED)
    assert "stores the address of module variable evo_table_a held in a register derived" in reason
    # the symbol itself as the stored value, and as an atom's operand
    for insn in ("st.global.u64 \t[%rd7], evo_table_a;", "atom.global.exch.b64 \t%rd8, [%rd7], evo_table_a;"):
        variant = axpy(f"\t{insn}\n")
        reason = hidden_state(variant, AXPY)
        check_reason(reason, variant, "evo_table_a", insn)
        assert "stores the address of module variable evo_table_a, which" in reason


CALLEE = ".func evo_sink(\n\t.param .b64 evo_sink_param_0\n)\n{\n\tret;\n}\n"
CALL = ("\t{ // callseq 9, 0\n\t.param .b64 param0;\n\tst.param.b64 \t[param0+0], %rd10;\n"
        "\tcall.uni \n\tevo_sink, \n\t(\n\tparam0\n\t);\n\t} // callseq 9\n")


def test_address_passed_to_a_call_or_returned_is_rejected():
    variant = axpy(CALL).replace(".visible .entry helper_axpy", CALLEE + ".visible .entry helper_axpy")
    check_reason(hidden_state(variant, AXPY), variant, "evo_table_a",
                 "st.param.b64 \t[param0+0], %rd10;", via=SEED)
    getter = (".func  (.param .b64 func_retval0) evo_where()\n{\n\t.reg .b64 \t%rd<3>;\n"
              "\tmov.u64 \t%rd1, evo_table_a;\n\tadd.s64 \t%rd2, %rd1, 4;\n"
              "\tst.param.b64 \t[func_retval0+0], %rd2;\n\tret;\n}\n")
    variant = AXPY.replace(".visible .entry helper_axpy", getter + ".visible .entry helper_axpy")
    check_reason(hidden_state(variant, AXPY), variant, "evo_table_a",
                 "st.param.b64 \t[func_retval0+0], %rd2;", via="mov.u64 \t%rd1, evo_table_a;")


def test_atom_and_red_through_a_derived_address_are_rejected():
    for insn in ("atom.global.add.u32 \t%r4, [%rd10], 1;", "red.global.add.u32 \t[%rd10+4], %r4;",
                 "cp.async.bulk.global.shared::cta.bulk_group \t[%rd10], [%rd6], 16;"):
        variant = axpy(f"\t{insn}\n")
        check_reason(hidden_state(variant, AXPY), variant, "evo_table_a", insn, via=SEED)
    # the derived address as an atom's operand (not its address): stored too
    insn = "atom.global.exch.b64 \t%rd8, [%rd7], %rd10;"
    variant = axpy(f"\t{insn}\n")
    check_reason(hidden_state(variant, AXPY), variant, "evo_table_a", insn, via=SEED)
    # the source of cp.async is read; a shared destination is no module state
    cp = axpy("\tcp.async.ca.shared.global \t[%rd6], [%rd10], 16;\n")
    assert hidden_state(cp, AXPY) is None


TWO_HOPS = ("\tmov.u64 \t%rd1, memo;\n\tadd.s64 \t%rd6, %rd1, %rd4;\n\tadd.s64 \t%rd7, %rd6, 4;\n"
            "\tst.global.f32 \t[%rd7], %f3;")


def test_taint_goes_through_two_hops():
    base = ptx("relu")
    variant = edit(base, ".global .align 4 .b8 memo[4096];", TWO_HOPS)
    check_reason(hidden_state(variant, base), variant, "memo", "st.global.f32 \t[%rd7], %f3;",
                 via="mov.u64 \t%rd1, memo;")
    # written before it is derived: flow-insensitive, still caught (conservative)
    hops = TWO_HOPS.split("\n")
    variant = edit(base, ".global .align 4 .b8 memo[4096];", "\n".join(hops[3:] + hops[:3]))
    check_reason(hidden_state(variant, base), variant, "memo", "st.global.f32 \t[%rd7], %f3;",
                 via="mov.u64 \t%rd1, memo;")


def test_registers_from_params_loads_and_predicates_stay_clean():
    """relu's own store goes through param-derived %rd7; values loaded through the table's
    address, and a predicate comparing it, carry no taint: stores of them are fine."""
    base = ptx("relu")
    body = ("\tmov.u64 \t%rd1, memo;\n\tld.global.f32 \t%f3, [%rd1+4];\n\tst.global.f32 \t[%rd7], %f3;\n"
            "\tsetp.eq.u64 \t%p1, %rd1, %rd6;\n\tselp.u32 \t%r3, 1, 0, %p1;\n\tst.global.u32 \t[%rd7], %r3;")
    variant = edit(base, ".global .align 4 .b8 memo[16] = {0, 0, 128, 63};", body)
    assert hidden_state(variant, base) is None
    # per function: %rd1 holds the address in the entry only; another function's %rd1 is its own
    other = (".func evo_other(\n\t.param .b64 evo_other_param_0\n)\n{\n\t.reg .b64 \t%rd<2>;\n"
             "\tld.param.u64 \t%rd1, [evo_other_param_0];\n\tst.global.u32 \t[%rd1], 0;\n\tret;\n}\n")
    two = variant.replace(".visible .entry relu", other + ".visible .entry relu")
    assert hidden_state(two, base) is None
    # a param's address plus the variable's is derived from the variable's
    mixed = edit(base, ".global .align 4 .b8 memo[16];", "\tmov.u64 \t%rd1, memo;\n"
                 "\tadd.s64 \t%rd0, %rd6, %rd1;\n\tst.global.f32 \t[%rd0], %f3;")
    check_reason(hidden_state(mixed, base), mixed, "memo", "st.global.f32 \t[%rd0], %f3;",
                 via="mov.u64 \t%rd1, memo;")
    # flow-insensitive: a register that holds the address anywhere (%rd6, reused after relu's
    # store) taints what is derived from it anywhere (%rd7): conservative, relu's store counts
    reuse = edit(base, ".global .align 4 .b8 memo[16];", "\tmov.u64 \t%rd6, memo;")
    check_reason(hidden_state(reuse, base), reuse, "memo", "st.global.f32 \t[%rd7], %f3;",
                 via="mov.u64 \t%rd6, memo;")


@needs_ptxas
def test_derived_address_variants_assemble():
    base = ptx("relu")
    variants = [
        AXPY, AXPY_BASE, axpy("\tst.global.f32 \t[%rd10], %f5;\n"), axpy("\tst.global.u64 \t[%rd7], %rd9;\n"),
        axpy("\tatom.global.add.u32 \t%r4, [%rd10], 1;\n"),
        axpy(CALL).replace(".visible .entry helper_axpy", CALLEE + ".visible .entry helper_axpy"),
        edit(base, ".global .align 4 .u32 memo;", "\tcvta.global.u64 \t%rd0, memo;\n\tst.u32 \t[%rd0], %r3;"),
        edit(base, ".global .align 4 .b8 memo[4096];", TWO_HOPS),
    ]
    for text in variants:
        result = compile_ptx(text)
        assert result.ok, result.error
