"""Tests for harness.gpu.instrument: clock64 instrumentation (real ptxas, cuobjdump when present)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from genomes.ptx import Directive, Instruction, Label, parse
from harness.compile import compile_many, compile_ptx
from harness.gpu.instrument import (
                                    CLOCK_PARAM, CLOCK_POISON, InstrumentError, clock_buffer, clock_words, cycles_from_clock,
                                    instrument,
                                    )
from harness.sass import disassemble
from harness.kernels.spec_ptx import ptx_entries
from harness.kernels.suite import list_kernels

HEADER = ".version 8.0\n.target sm_90\n.address_size 64\n"

# Many threads, three ways out: a predicated ret, a negated-predicate exit, and the final ret.
# A .func with its own ret must stay untouched.
MULTI_EXIT = HEADER + """
.func (.reg .b32 r) twice(.reg .b32 x)
{
    add.s32 r, x, x;
    ret;
}

.visible .entry multi(
    .param .u64 multi_out, // the output
    .param .u32 multi_n
)
{
    .reg .pred %p<3>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<4>;

$L__top:
    ld.param.u64 %rd1, [multi_out];
    ld.param.u32 %r1, [multi_n];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r2, %tid.x;
    setp.ge.u32 %p1, %r2, %r1;
    @%p1 ret;
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd3, %rd2, %rd3;
    setp.eq.u32 %p2, %r2, 7;
    @!%p2 bra $L__store;
    st.global.u32 [%rd3], 0;
    exit;
$L__store:
    call.uni (%r3), twice, (%r2);
    st.global.u32 [%rd3], %r3;
    ret;
}
"""


@pytest.fixture(scope="module")
def suite():
    return list_kernels()


def _entry_lines(ptx: str, entry: str):
    return parse(ptx).entry(entry).body


def _clock_reads(ptx: str, entry: str) -> list[int]:
    """Indices (in the entry body) of every %clock64 read."""
    return [i for i, ln in enumerate(_entry_lines(ptx, entry))
            if isinstance(ln.stmt, Instruction) and "%clock64" in ln.stmt.operands]


def test_every_suite_kernel_assembles_instrumented(suite):
    """clock64 kernels must assemble; events kernels too, even though they are not timed so."""
    texts = [instrument(spec.ptx_text(), spec.entry) for spec in suite]
    results = compile_many(texts)
    failed = {spec.name: r.error for spec, r in zip(suite, results) if not r.ok}
    assert not failed
    assert sum(spec.timing == "clock64" for spec in suite) >= 64


def test_clock_twin_leaves_the_variant_code_as_assembled_alone(suite):
    """with_clock_twin: one module with the kernel and its instrumented copy; ptxas gives
    the kernel the same code and registers as alone, and the copy those of instrument()."""
    from harness.gpu.instrument import clock_entry_name, with_clock_twin
    from harness.sass import _elf_text_sections, cubin_text_hash

    kernels = [s for s in suite if not s.name.startswith("gemm_tile_1")]  # skip ~1 s ptxas runs
    twins = compile_many([with_clock_twin(s.ptx_text(), s.entry) for s in kernels])
    alone = compile_many([s.ptx_text() for s in kernels])
    instrumented = compile_many([instrument(s.ptx_text(), s.entry) for s in kernels])
    for spec, t, a, i in zip(kernels, twins, alone, instrumented):
        assert t.ok, (spec.name, t.error)
        assert cubin_text_hash(t.cubin, [spec.entry]) == cubin_text_hash(a.cubin), spec.name
        assert t.registers == a.registers and t.shared_mem == a.shared_mem, spec.name
        twin = clock_entry_name(spec.entry)
        assert t.functions[twin].registers == i.registers, spec.name
        # the twin's machine code is instrument()'s, under its own name
        twin_code = dict(_elf_text_sections(t.cubin))[f".text.{twin}"]
        assert twin_code == dict(_elf_text_sections(i.cubin))[f".text.{spec.entry}"], spec.name


def test_clock_param_is_last_and_u64(suite):
    for spec in suite:
        out = instrument(spec.ptx_text(), spec.entry)
        params = parse(out).entry(spec.entry).params
        assert [p.name for p in params][-1] == CLOCK_PARAM
        assert len(params) == len(spec.params) + 1
        last = ptx_entries(out)[spec.entry][-1]  # the spec module's independent reader agrees
        assert (last.name, last.ptx_type, last.bits) == (CLOCK_PARAM, "u64", 64)


def test_one_clock_read_at_entry_and_one_per_return(suite):
    for spec in suite:
        base, out = spec.ptx_text(), instrument(spec.ptx_text(), spec.entry)
        returns = sum(1 for i in parse(base).entry(spec.entry).instructions() if i.op in ("ret", "exit"))
        reads = _clock_reads(out, spec.entry)
        assert len(reads) == 1 + returns, spec.name
        body = _entry_lines(out, spec.entry)
        first_code = next(i for i, ln in enumerate(body) if not isinstance(ln.stmt, Directive))
        assert reads[0] == first_code, spec.name  # before the first instruction, after the .reg's


def test_predicated_returns_keep_their_guard():
    out = instrument(MULTI_EXIT, "multi")
    body = [ln.stmt for ln in _entry_lines(out, "multi")]
    instrs = [s for s in body if isinstance(s, Instruction)]
    # one start read + three returns (the .func's ret is not the entry's)
    assert sum("%clock64" in i.operands for i in instrs) == 4
    rets = [i for i in instrs if i.op in ("ret", "exit")]
    assert len(rets) == 3 and all(i.pred is None for i in rets)
    # "@%p1 ret;" became "@!%p1 bra skip; <epilogue>; ret; skip:"
    guard = next(i for i in instrs if i.op == "bra" and i.pred == "@!%p1")
    skip = guard.operands[0]
    at = body.index(guard)
    label_at = next(k for k, s in enumerate(body) if isinstance(s, Label) and s.name == skip)
    between = [s for s in body[at + 1:label_at] if isinstance(s, Instruction)]
    assert "%clock64" in between[0].operands and between[-1].op == "ret"
    assert sum(s.op == "st" for s in between) == 2
    # every return is preceded by its two clock stores
    for k, s in enumerate(instrs):
        if s.op in ("ret", "exit"):
            assert [i.opcode for i in instrs[k - 2:k]] == ["st.global.u64", "st.global.u64"]
    # the .func is printed exactly as read
    assert "add.s32 r, x, x;\n    ret;\n}" in out
    assert compile_ptx(out).ok


def test_new_registers_and_labels_cannot_clash():
    out = instrument(MULTI_EXIT, "multi")
    decls = [ln.stmt.text for ln in _entry_lines(out, "multi") if isinstance(ln.stmt, Directive)]
    prefixes = [re.search(r"(%\w+?)<", d).group(1) for d in decls if d.startswith(".reg")]
    assert len(prefixes) == len(set(prefixes))
    assert {"%evoclk", "%evotid"} <= set(prefixes)
    with pytest.raises(InstrumentError, match="reserved"):
        instrument(out, "multi")  # twice: the names are taken
    with pytest.raises(InstrumentError, match="no entry 'nope'"):
        instrument(MULTI_EXIT, "nope")


def test_entry_without_params_or_final_ret():
    ptx = HEADER + ".visible .entry bare()\n{\n    .reg .b32 %r<2>;\n    mov.u32 %r1, 1;\n}\n"
    out = instrument(ptx, "bare")
    assert [p.name for p in parse(out).entry("bare").params] == [CLOCK_PARAM]
    assert len(_clock_reads(out, "bare")) == 2  # falls off the end: epilogue appended
    assert compile_ptx(out).ok


def _sass_ops(cubin: bytes) -> list[str] | None:
    text = disassemble(cubin)
    if text is None:
        return None
    return re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+[^;]*);", text)


@pytest.mark.parametrize("name", ["gemm_tile_4x6x8", "softmax"])
def test_clock_reads_bracket_the_work_in_sass(suite, name):
    """ptxas keeps the start read before every memory access and the end read after them."""
    spec = next(s for s in suite if s.name == name)
    result = compile_ptx(instrument(spec.ptx_text(), spec.entry))
    ops = _sass_ops(result.cubin)
    if ops is None:
        pytest.skip("cuobjdump/nvdisasm not available")
    clocks = [i for i, op in enumerate(ops) if "SR_CLOCKLO" in op]
    memory = [i for i, op in enumerate(ops) if re.match(r"(LDG|STG|LDS|STS|BAR|RED|ATOM)", op)]
    ours = [i for i in memory if ops[i].startswith("STG.E.64")][-2:]  # the two clock stores
    kernel = [i for i in memory if i not in ours]
    assert len(ours) == 2 and kernel
    assert clocks[0] < kernel[0]
    assert kernel[-1] < clocks[-1] < ours[0]


def test_clock_words_and_buffer():
    one = SimpleNamespace(threads_per_block=1)
    block = SimpleNamespace(threads_per_block=256)
    assert clock_words(one) == 2 and clock_words(block) == 512
    buf = clock_buffer(block)
    assert buf.dtype == np.uint64 and buf.size == 512 and (buf == CLOCK_POISON).all()


def test_cycles_from_clock():
    start = np.array([1000, 1004, 1002, 1010], np.uint64)
    end = np.array([2000, 2952, 2100, 2500], np.uint64)
    words = np.stack([start, end], axis=1).ravel()
    assert cycles_from_clock(words) == 2952 - 1000
    assert cycles_from_clock(np.array([5, 7], np.uint64)) == 2
    big = np.array([2**63, 2**63 + 1951], np.uint64)  # no float rounding on large counters
    assert cycles_from_clock(big) == 1951


def test_cycles_from_clock_rejects_unwritten_threads():
    words = np.array([10, 20, 11, 21, CLOCK_POISON, CLOCK_POISON], np.uint64)
    with pytest.raises(ValueError, match="1 of 3 threads did not write.*first thread 2"):
        cycles_from_clock(words)
    words[4] = 12  # only the end word missing: still unwritten
    with pytest.raises(ValueError, match="did not write"):
        cycles_from_clock(words)
    with pytest.raises(ValueError, match="2 words per thread"):
        cycles_from_clock(np.array([1, 2, 3], np.uint64))
    with pytest.raises(ValueError, match="before its start"):
        cycles_from_clock(np.array([30, 20], np.uint64))


# --------------------------------------------------------------------------- on a GPU


def _gpu_launch(ptx: str, entry: str, grid, block, args) -> None:
    """Assemble ``ptx`` and launch ``entry`` once with CuPy; ``args`` are CuPy arrays/NumPy scalars."""
    import tempfile

    import cupy

    result = compile_ptx(ptx)
    assert result.ok, result.error
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(result.cubin)
        f.flush()
        kernel = cupy.RawModule(path=f.name).get_function(entry)
    kernel(tuple(grid), tuple(block), tuple(args))
    cupy.cuda.Device().synchronize()


@pytest.mark.gpu
def test_instrumented_block_kernel_runs_with_every_exit():
    """64 threads leave by three different returns; each writes its clock words, results unchanged."""
    import cupy

    n = np.uint32(40)
    for ptx in (MULTI_EXIT, instrument(MULTI_EXIT, "multi")):
        out = cupy.full(64, 12345, dtype=cupy.int32)
        args = [out, n]
        if CLOCK_PARAM in ptx:
            clock = cupy.asarray(clock_buffer(SimpleNamespace(threads_per_block=64)))
            args.append(clock)
        _gpu_launch(ptx, "multi", (1, 1, 1), (64, 1, 1), args)
        expected = [2 * t if t < 40 else 12345 for t in range(64)]
        expected[7] = 0
        assert out.get().tolist() == expected
    cycles = cycles_from_clock(clock.get())
    assert 0 < cycles < 1_000_000


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["gemm_tile_4x6x8", "reduce_sum"])
def test_instrumented_kernel_gives_the_same_outputs(suite, name):
    """Bit-identical outputs with and without instrumentation; clock64 kernels give sane cycles."""
    import cupy

    from harness.gpu.input_sets import make_inputs

    spec = next(s for s in suite if s.name == name)
    inputs = make_inputs(spec, 0)
    outs = []
    for ptx in (spec.ptx_text(), instrument(spec.ptx_text(), spec.entry)):
        dev = {p.name: cupy.asarray(inputs[p.name]) if p.kind == "buffer" else inputs[p.name]
               for p in spec.params}
        args = [dev[p.name] for p in spec.params]
        clock = cupy.asarray(clock_buffer(spec))
        if CLOCK_PARAM in ptx:
            args.append(clock)
        _gpu_launch(ptx, spec.entry, spec.grid, spec.block, args)
        outs.append({p.name: dev[p.name].get() for p in spec.outputs()})
    for p in spec.outputs():
        assert outs[0][p.name].tobytes() == outs[1][p.name].tobytes()
    if spec.timing == "clock64":
        assert 100 < cycles_from_clock(clock.get()) < 100_000


SPIN = HEADER + """
.visible .entry spin(.param .u64 spin_out, .param .u64 spin_cycles)
{
    .reg .pred %p;
    .reg .u64 %t<4>;
    .reg .u64 %a;
    ld.param.u64 %t3, [spin_cycles];
    mov.u64 %t0, %clock64;
SPIN_LOOP:
    mov.u64 %t1, %clock64;
    sub.u64 %t2, %t1, %t0;
    setp.lt.u64 %p, %t2, %t3;
    @%p bra SPIN_LOOP;
    ld.param.u64 %a, [spin_out];
    cvta.to.global.u64 %a, %a;
    st.global.u64 [%a], %t2;
    ret;
}
"""


@pytest.mark.gpu
@pytest.mark.parametrize("work", [20_000, 200_000])
def test_the_clock_instrument_reads_a_kernel_of_known_work(work):
    """A kernel that spins until its own counter has advanced ``work`` cycles: the
    instrumented reading must be that much and little more (a timer off by 2x either way,
    or one that reads another counter, fails)."""
    import cupy

    out = cupy.zeros(1, dtype=cupy.uint64)
    clock = cupy.asarray(clock_buffer(SimpleNamespace(threads_per_block=1)))
    _gpu_launch(instrument(SPIN, "spin"), "spin", (1, 1, 1), (1, 1, 1), [out, np.uint64(work), clock])
    spun = int(out.get()[0])
    cycles = cycles_from_clock(clock.get())
    assert work <= spun < work + 200, spun  # the loop's own exit: one iteration past work
    assert spun <= cycles <= spun + 500, (cycles, spun)  # entry/exit reads bracket the loop
