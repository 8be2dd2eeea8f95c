"""vec_ld, vec_st, split_ld and the alignment analysis, with real ptxas.

The suite's gemm_tile_MxNxK (nvcc 13.0 -O3 sm_90) first reads the whole A and B tiles
with scalar loads at consecutive offsets from the cvta'd param pointers (M·K + K·N loads,
all before the first store), then computes and stores C in order, one scalar store per
element with only FMAs between stores. So gemm_tile_4x4x4's 32 scalar loads become 8 v4
loads and its 16 stores 4 v4 stores. Every tile has an even number of elements per
dimension, so each tile is a multiple of 16 bytes long and needs no v2 fallback: that
and misaligned rows are checked on hand-written PTX below.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from genomes.alignment import address_alignment, known_alignment
from genomes.memory import PointerInfo, access_of, effect
from genomes.ptx import Module, parse, registers_in
from genomes.transforms import registry
from genomes.transforms import split_ld, vec_ld, vec_st
from genomes.vectorize import SIZES
from harness.toolchain import MissingToolError, find_ptxas

ROOT = Path(__file__).parents[1]
KERNELS = ROOT / "harness" / "kernels"
SUITE = sorted(KERNELS.glob("*.ptx"))
GEMMS = sorted(KERNELS.glob("gemm_tile_*.ptx"))


@functools.cache
def _ptxas_path() -> str | None:
    """ptxas from EVO_PTXAS, the PATH or the pip wheel (as evo finds it), else None."""
    try:
        return str(find_ptxas())
    except MissingToolError:
        return None


needs_ptxas = pytest.mark.skipif(_ptxas_path() is None, reason="ptxas not found")


def ptxas(text: str, opt: int = 3) -> str:
    """ptxas's error text ("" when it assembles)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(text)
        r = subprocess.run([_ptxas_path(), "-arch=sm_90", f"-O{opt}", str(src), "-o",
                            str(Path(tmp) / "k.cubin")], capture_output=True, text=True)
    return "" if r.returncode == 0 else r.stderr.strip() or f"rc={r.returncode}"


@functools.cache
def _parsed(path: Path) -> Module:
    return parse(path.read_text(), str(path))


def load(path: Path) -> Module:
    """A fresh, editable copy of a suite kernel (each file is parsed once)."""
    return _parsed(path).copy()


def global_loads(module: Module) -> collections.Counter:
    """Opcode counts of the global loads: {"ld.global.f32": 64, "ld.global.v4.f32": 16}."""
    return collections.Counter(i.opcode for f in module.functions for i in f.instructions()
                               if i.op == "ld" and i.space == "global")


def load_pairs(module: Module) -> collections.Counter:
    """(destination, resolved base, resolved byte offset, stores before) for each element
    of each global load, vector loads expanded: merging, hoisting and splitting must keep
    this multiset. The count of stores and barriers before the load is there because a
    load must never move across one."""
    pairs = collections.Counter()
    for fn in module.functions:
        info = PointerInfo(fn)
        epoch = 0
        for ins in fn.instructions():
            epoch += effect(ins) in ("store", "barrier")
            acc = access_of(ins)
            if acc is None or acc.kind != "load" or acc.space != "global":
                continue
            dests = registers_in(ins.operands[0])
            step = acc.size // len(dests)
            base, off = info.resolve(acc)
            for k, dest in enumerate(dests):
                pairs[(dest, base, off + k * step, epoch)] += 1
    return pairs


def store_pairs(module: Module) -> collections.Counter:
    """(stored value, resolved base, resolved byte offset) for each stored element."""
    pairs = collections.Counter()
    for fn in module.functions:
        info = PointerInfo(fn)
        for ins in fn.instructions():
            acc = access_of(ins)
            if acc is None or acc.kind != "store" or acc.space != "global":
                continue
            values = [v.strip() for v in ins.operands[1].strip("{} ").split(",")]
            base, off = info.resolve(acc)
            for k, value in enumerate(values):
                pairs[(value, base, off + k * acc.size // len(values))] += 1
    return pairs


def vectors(module: Module, op: str):
    """(instruction, vector length, resolved offset, PointerInfo) for each vector access."""
    for fn in module.functions:
        info = PointerInfo(fn)
        for ins in fn.instructions():
            m = re.search(r"\.v(\d)\.", ins.opcode)
            if ins.op == op and ins.space == "global" and m:
                yield ins, int(m.group(1)), info.resolve(access_of(ins)), info


def applied(transform, path_or_text, **params) -> tuple[Module, int]:
    module = parse(path_or_text) if isinstance(path_or_text, str) else load(path_or_text)
    return module, transform.apply(module, **params)


# --------------------------------------------------------------------------- gemm tiles


def test_suite_is_there():
    assert {KERNELS / "gemm_tile_4x4x4.ptx", KERNELS / "gemm_tile_4x6x8.ptx"} <= set(GEMMS)


@needs_ptxas
def test_gemm_4x4x4_width4_makes_8_v4_loads():
    before = load(KERNELS / "gemm_tile_4x4x4.ptx")
    assert global_loads(before) == {"ld.global.f32": 32}  # what nvcc emits: see docstring
    after, n = applied(vec_ld, KERNELS / "gemm_tile_4x4x4.ptx", width=4)
    assert n == 8
    assert global_loads(after) == {"ld.global.v4.f32": 8}
    starts = sorted(where for _, _, where, _ in vectors(after, "ld"))
    assert starts == [(f"param:gemm_tile_4x4x4_param_{p}", 16 * i)
                      for p in (0, 1) for i in range(4)]  # A's and B's four rows
    assert load_pairs(after) == load_pairs(before)
    assert ptxas(after.render()) == ""


@needs_ptxas
def test_gemm_4x6x8_loads_and_stores():
    before = load(KERNELS / "gemm_tile_4x6x8.ptx")
    after, n = applied(vec_ld, KERNELS / "gemm_tile_4x6x8.ptx", width=4)
    # A is 32 floats and B 48 (B's 24-byte rows are contiguous, so the tile is read as
    # one 192-byte run of 16-aligned quads, whatever the row boundaries).
    assert n == 20 and global_loads(after) == {"ld.global.v4.f32": 20}
    assert ptxas(after.render()) == ""
    after, n = applied(vec_st, KERNELS / "gemm_tile_4x6x8.ptx", width=4)
    assert n == 6 and store_pairs(after) == store_pairs(before)
    assert ptxas(after.render()) == ""


@pytest.mark.parametrize("width", (2, 4))
def test_every_vector_is_aligned_and_keeps_each_access(width):
    """On every suite kernel: vectors only at proven alignment (v4 at 16 bytes), the same
    (register, address) pairs loaded and stored, and split_ld(vec_ld(x)) ~ x."""
    for path in SUITE:
        before = load(path)
        after, n = applied(vec_ld, path, width=width)
        assert n > 0 or path not in GEMMS, path.name
        found = list(vectors(after, "ld"))
        assert len(found) == n
        for ins, length, (base, off), info in found:
            assert address_alignment(ins.address(), info) >= 4 * length, ins.render()
            assert length <= width
            if path in GEMMS:  # param-rooted: the offset itself must be aligned
                assert base.startswith("param:") and off % (4 * length) == 0, ins.render()
        # The semantic check: every (destination, address) read before is read after.
        assert load_pairs(after) == load_pairs(before), path.name
        back = after.copy()
        split_ld.apply(back)
        assert global_loads(back) == global_loads(before), path.name
        assert load_pairs(back) == load_pairs(before), path.name

        stored, n = applied(vec_st, path, width=width)
        assert n > 0 or path not in GEMMS, path.name
        for ins, length, (base, off), info in vectors(stored, "st"):
            assert address_alignment(ins.address(), info) >= 4 * length, ins.render()
            assert length <= width
            if path in GEMMS:
                assert base.startswith("param:") and off % (4 * length) == 0, ins.render()
        assert store_pairs(stored) == store_pairs(before), path.name


def _variants(path: Path) -> list[tuple[str, str]]:
    out = []
    for transform, params in ((vec_ld, {"width": 2}), (vec_ld, {"width": 4}),
                              (vec_st, {"width": 2}), (vec_st, {"width": 4}), (split_ld, {})):
        original = _parsed(path).render()
        module, n = applied(transform, path, **params)
        label = f"{path.name} {transform.TRANSFORM.name}{params}"
        if n == 0:
            assert module.render() == original, label
        else:
            out.append((label, module.render()))
    return out


@needs_ptxas
def test_every_suite_kernel_each_transform_no_change_or_assembles():
    assert SUITE
    variants = [v for path in SUITE for v in _variants(path)]
    assert variants
    # -O0: whether ptxas accepts the PTX does not depend on optimization, and the large
    # tiles take seconds at -O3 (test_transforms_suite assembles them at -O3).
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        errors = list(pool.map(lambda v: ptxas(v[1], opt=0), variants))
    failed = [f"{label}: {err}" for (label, _), err in zip(variants, errors) if err]
    assert not failed, "\n".join(failed[:5])


def test_registry_and_groups():
    table = registry()
    assert table["vec_ld"].group == table["split_ld"].group == "ld_width"
    assert table["vec_st"].group == "st_width"
    assert table["vec_ld"].param("width").coerce("4") == 4


# --------------------------------------------------------------------------- hand-written

HEADER = """.version 9.0
.target sm_90
.address_size 64

.visible .entry k(
\t.param .u64 k_param_0,
\t.param .u64 k_param_1,
\t.param .u64 k_param_2
)
{
\t.reg .f32 \t%f<16>;
\t.reg .f64 \t%fd<8>;
\t.reg .b32 \t%r<8>;
\t.reg .b64 \t%rd<16>;
\t.reg .pred \t%p<4>;

\tld.param.u64 \t%rd1, [k_param_0];
\tld.param.u64 \t%rd2, [k_param_1];
\tld.param.u64 \t%rd9, [k_param_2];
\tcvta.to.global.u64 \t%rd3, %rd1;
\tcvta.to.global.u64 \t%rd4, %rd2;
"""


def kernel(body: str) -> str:
    return HEADER + body + "\tret;\n}\n"


TWO_LOADS = """\tld.global.f32 \t%f1, [%rd3];
{between}\tld.global.f32 \t%f2, [%rd3+4];
\tadd.f32 \t%f3, %f1, %f2;
\tst.global.f32 \t[%rd4+8], %f3;
"""


@needs_ptxas
@pytest.mark.parametrize("between, merged", [
    ("", True),
    ("\tmul.f32 \t%f4, %f1, %f1;\n", True),
    ("\tst.global.f32 \t[%rd4], %f1;\n", False),  # the store may alias A (other param)
    ("\tst.global.f32 \t[%rd3+64], %f1;\n", False),  # conservative: any store blocks
    ("\tbar.sync \t0;\n", False),
    ("\tmov.f32 \t%f2, 0f00000000;\n", False),  # destination written between
    ("\tmov.f32 \t%f5, %f2;\n", False),  # destination read between
    ("\tadd.s64 \t%rd3, %rd3, 16;\n", False),  # base redefined between
])
def test_vec_ld_hoists_only_past_harmless_code(between, merged):
    text = kernel(TWO_LOADS.format(between=between))
    assert ptxas(text) == ""
    module, n = applied(vec_ld, text, width=4)  # falls back to v2: only two loads
    assert n == (1 if merged else 0)
    if merged:
        assert "ld.global.v2.f32 \t{%f1, %f2}, [%rd3];" in module.render()
        assert ptxas(module.render()) == ""
        assert load_pairs(module) == load_pairs(parse(text))
    else:
        assert module.render() == text


def test_vec_ld_unchanged_lines_are_byte_identical_and_whitespace_kept():
    text = kernel(TWO_LOADS.format(between="\t// keep me\n"))
    module, n = applied(vec_ld, text, width=2)
    assert n == 1
    expected = text.replace("\tld.global.f32 \t%f1, [%rd3];\n",
                            "\tld.global.v2.f32 \t{%f1, %f2}, [%rd3];\n")
    expected = expected.replace("\t// keep me\n\tld.global.f32 \t%f2, [%rd3+4];\n", "")
    assert module.render() == expected


@pytest.mark.parametrize("body, count", [
    # base = A+4: [A+4],[A+8] is not 8-aligned; [A+8],[A+12] is.
    ("\tadd.s64 \t%rd5, %rd3, 4;\n\tld.global.f32 \t%f1, [%rd5];\n"
     "\tld.global.f32 \t%f2, [%rd5+4];\n\tld.global.f32 \t%f3, [%rd5+8];\n", 1),
    # row 1 of a 6-float-wide matrix (24..44): only 8-aligned, so v2 then v4.
    ("".join(f"\tld.global.f32 \t%f{k + 1}, [%rd3+{24 + 4 * k}];\n" for k in range(6)), 2),
    # a size parameter is not a pointer: A + 4·n is only 4-aligned.
    ("\tshl.b64 \t%rd6, %rd9, 2;\n\tadd.s64 \t%rd7, %rd3, %rd6;\n"
     "\tld.global.f32 \t%f1, [%rd7];\n\tld.global.f32 \t%f2, [%rd7+4];\n", 0),
    # a thread index times 16 is 16-aligned: a v4.
    ("\tmov.u32 \t%r1, %tid.x;\n\tmul.wide.u32 \t%rd8, %r1, 16;\n\tadd.s64 \t%rd7, %rd3, %rd8;\n"
     "\tld.global.f32 \t%f1, [%rd7];\n\tld.global.f32 \t%f2, [%rd7+4];\n"
     "\tld.global.f32 \t%f3, [%rd7+8];\n\tld.global.f32 \t%f4, [%rd7+12];\n", 1),
    # 8-byte loads pair up into v2.f64 (16 bytes), out of program order too.
    ("\tld.global.f64 \t%fd2, [%rd3+24];\n\tld.global.f64 \t%fd1, [%rd3+16];\n", 1),
    # different guards do not merge; equal guards do.
    ("\tsetp.ne.s64 \t%p1, %rd9, 0;\n\t@%p1 ld.global.f32 \t%f1, [%rd3];\n"
     "\tld.global.f32 \t%f2, [%rd3+4];\n", 0),
    ("\tsetp.ne.s64 \t%p1, %rd9, 0;\n\t@%p1 ld.global.b32 \t{ %r1 }, [ %rd3 + 0 ];\n"
     "\t@%p1 ld.global.b32 \t{ %r2 }, [ %rd3 + 4 ];\n", 1),
    # shared and param loads are never touched.
    ("\tld.param.u64 \t%rd10, [k_param_0+0];\n", 0),
    # __ldg(x + i): the pointer param plus 16·tid with no cvta is still a pointer.
    ("\tmov.u32 \t%r1, %tid.x;\n\tmul.wide.u32 \t%rd8, %r1, 16;\n\tadd.s64 \t%rd7, %rd9, %rd8;\n"
     + "".join(f"\tld.global.nc.f32 \t%f{k + 1}, [%rd7+{4 * k}];\n" for k in range(4)), 1),
    # int8 data: four bytes at a 4-aligned offset are one v4.u8 (one 32-bit access)...
    ("".join(f"\tld.global.u8 \t%r{k + 1}, [%rd3+{4 + k}];\n" for k in range(4)), 1),
    # ...but [A+1..A+4] is not 4-aligned: only the 2-aligned pair [A+2], [A+3] merges.
    ("".join(f"\tld.global.s8 \t%r{k + 1}, [%rd3+{1 + k}];\n" for k in range(4)), 1),
])
def test_vec_ld_needs_provable_alignment(body, count):
    text = kernel(body)
    module, n = applied(vec_ld, text, width=4)
    assert n == count, module.render()
    for ins, length, (base, off), info in vectors(module, "ld"):
        assert address_alignment(ins.address(), info) >= length * SIZES[ins.mods[-1]]
    assert load_pairs(module) == load_pairs(parse(text))
    if _ptxas_path():
        assert ptxas(module.render()) == ""


def test_a_param_added_to_a_variables_address_is_an_offset_not_a_pointer():
    """``table[off]`` with ``table`` a (16-aligned) global variable's address and ``off``
    a 64-bit param: the param is the offset, so nothing about its alignment is known."""
    body = ("\tmov.u64 \t%rd10, gtab;\n\tand.b64 \t%rd11, %rd10, -16;\n"
            "\tadd.s64 \t%rd7, %rd11, %rd9;\n"
            + "".join(f"\tld.global.u8 \t%r{k + 1}, [%rd7+{k}];\n" for k in range(4)))
    text = kernel(body).replace(".address_size 64\n",
                                ".address_size 64\n\n.global .align 4 .b8 gtab[64];\n")
    module, n = applied(vec_ld, text, width=4)
    assert n == 0, module.render()
    if _ptxas_path():
        assert ptxas(text) == ""


def test_known_alignment_rules():
    text = kernel("\tadd.s64 \t%rd5, %rd3, 24;\n\tmov.u32 \t%r1, %tid.x;\n"
                  "\tshl.b32 \t%r2, %r1, 3;\n\tcvt.u64.u32 \t%rd6, %r2;\n"
                  "\tand.b64 \t%rd7, %rd9, -32;\n\tadd.s64 \t%rd8, %rd4, %rd6;\n"
                  "\tld.global.f32 \t%f1, [%rd5];\n\tld.global.f32 \t%f2, [%rd8];\n")
    fn = parse(text).functions[0]
    info = PointerInfo(fn)
    assert known_alignment("%rd3", info) == 16  # a pointer param (cvta'd)
    assert known_alignment("%rd9", info) == 1  # a u64 param never used as an address
    assert known_alignment("%rd5", info) == 8
    assert known_alignment("%rd6", info) == 8  # tid << 3, zero-extended
    assert known_alignment("%rd7", info) == 16  # masked: capped at 16
    assert known_alignment("%rd8", info) == 8
    assert known_alignment("%r1", info) == 1


STORES = """\tld.global.f32 \t%f1, [%rd3];
\tst.global.f32 \t[%rd4], %f1;
{between}\tst.global.f32 \t[%rd4+4], %f2;
\tst.global.f32 \t[%rd4+8], 0f00000000;
\tst.global.f32 \t[%rd4+12], %f1;
"""


@needs_ptxas
@pytest.mark.parametrize("between, result", [
    ("\tld.global.f32 \t%f2, [%rd4+32];\n", "v4"),  # same buffer, other bytes
    ("\tld.global.f32 \t%f2, [%rd3+4];\n", "v2"),  # may alias the first store: 8..16 only
    ("\tld.global.f32 \t%f2, [%rd4];\n", "v2"),  # reads the first store's bytes
    ("\tmov.f32 \t%f1, 0f3F800000;\n\tmov.f32 \t%f2, %f1;\n", "v2"),  # value redefined
    ("\tmov.f32 \t%f2, %f1;\n\tbar.sync \t0;\n", "v2"),
])
def test_vec_st_sinks_only_past_harmless_code(between, result):
    text = kernel(STORES.format(between=between))
    assert ptxas(text) == ""
    module, n = applied(vec_st, text, width=4)
    out = module.render()
    if result == "v4":
        assert n == 1
        assert "st.global.v4.f32 \t[%rd4], {%f1, %f2, 0f00000000, %f1};" in out
        assert "st.global.f32" not in out
    else:  # the last two (8-aligned at +8) still pair up
        assert n == 1
        assert "st.global.v2.f32 \t[%rd4+8], {0f00000000, %f1};" in out
        assert out.count("st.global.f32") == 2
    assert ptxas(out) == ""
    again, n = applied(vec_st, text, width=2)
    assert n == (2 if result == "v4" else 1)
    assert ptxas(again.render()) == ""


FLOAT4 = """.version 9.0
.target sm_90
.address_size 64

.visible .entry f4copy(
\t.param .u64 f4copy_param_0,
\t.param .u64 f4copy_param_1
)
{
\t.reg .pred \t%p<2>;
\t.reg .f32 \t%f<10>;
\t.reg .b32 \t%r<3>;
\t.reg .b64 \t%rd<10>;

\tld.param.u64 \t%rd1, [f4copy_param_0];
\tld.param.u64 \t%rd2, [f4copy_param_1];
\tcvta.to.global.u64 \t%rd5, %rd1;
\tmov.u32 \t%r1, %tid.x;
\tmul.wide.s32 \t%rd6, %r1, 16;
\tadd.s64 \t%rd7, %rd5, %rd6;
\tld.global.v4.f32 \t{%f1, %f2, %f3, %f4}, [%rd7];  // float4 v = a[i];
\tcvta.to.global.u64 \t%rd8, %rd2;
\tadd.s64 \t%rd9, %rd8, %rd6;
\tadd.f32 \t%f9, %f1, 0f3F800000;
\tst.global.v4.f32 \t[%rd9], {%f9, %f2, %f3, %f4};
\t@%p1 ld.global.nc.v2.f32 \t{%f5, _}, [%rd7+16];
\tret;
}
"""


@needs_ptxas
def test_split_ld_on_nvcc_float4_and_back():
    assert ptxas(FLOAT4) == ""
    module, n = applied(split_ld, FLOAT4)
    assert n == 2
    out = module.render()
    assert "\tld.global.f32 \t%f1, [%rd7];\n\tld.global.f32 \t%f2, [%rd7+4];\n" in out
    assert "\tld.global.f32 \t%f4, [%rd7+12];  // float4 v = a[i];\n" in out
    assert "@%p1 ld.global.nc.f32 \t%f5, [%rd7+16];\n\tret;" in out  # no load for "_"
    assert "st.global.v4.f32" in out  # stores are not split_ld's business
    assert ptxas(out) == ""
    merged, n = applied(vec_ld, out, width=4)
    assert n == 1 and "ld.global.v4.f32 \t{%f1, %f2, %f3, %f4}, [%rd7];" in merged.render()


def test_split_ld_leaves_loads_that_overwrite_their_base():
    text = kernel("\tld.global.v2.u64 \t{%rd5, %rd6}, [%rd3];\n"
                  "\tld.global.v2.u64 \t{%rd3, %rd7}, [%rd3+16];\n")
    module, n = applied(split_ld, text)
    assert n == 1
    assert "ld.global.v2.u64 \t{%rd3, %rd7}, [%rd3+16];" in module.render()
