"""reorder (genomes/transforms/reorder.py) and its DAG (genomes/dag.py).

Suite-wide checks run every strategy on every kernel in harness/kernels/*.ptx: the result
assembles with real ptxas, is a permutation within each block, respects every edge of the
DAG built on the original, and moves nothing across a fence (bar.sync, braces, ...).
Lines are tracked by identity: ``Module.copy`` shares the ``Line`` objects and reorder
only moves them, so ``id(line)`` says where each original line went.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from genomes.dag import FENCE_KINDS, build_dag
from genomes.memory import PointerInfo, basic_blocks
from genomes.ptx import Label, Module, parse
from genomes.transforms import registry
from genomes.transforms.reorder import STRATEGIES, apply, schedule

ROOT = Path(__file__).parents[1]
KERNELS = sorted((ROOT / "harness" / "kernels").glob("*.ptx"))
PTXAS = shutil.which("ptxas")
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas not found")
needs_suite = pytest.mark.skipif(not KERNELS, reason="no harness/kernels/*.ptx")

HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n\n"
ALIAS_PTX = HEAD + """.visible .entry alias(
	.param .u64 alias_param_0,
	.param .u64 alias_param_1
)
{
	.reg .f32 	%f<9>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [alias_param_0];
	ld.param.u64 	%rd2, [alias_param_1];
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	ld.global.f32 	%f1, [%rd3];
	add.f32 	%f2, %f1, 0f3F800000;
	mul.f32 	%f3, %f2, %f2;
	st.global.f32 	[%rd3], %f3;
	ld.global.f32 	%f4, [%rd4];   // another param: may alias the store
	ld.global.f32 	%f5, [%rd3+4]; // same base, disjoint bytes: free to move up
	ld.global.f32 	%f6, [%rd3];   // the stored word itself
	add.f32 	%f7, %f4, %f5;
	add.f32 	%f8, %f7, %f6;
	st.global.f32 	[%rd4+4], %f8;
	ret;
}
"""
BARRIER_PTX = HEAD + """.visible .entry barrier(
	.param .u64 barrier_param_0
)
{
	.reg .f32 	%f<5>;
	.reg .b32 	%r<5>;
	.reg .b64 	%rd<3>;
	.shared .align 4 .b8 smem[1024];

	ld.param.u64 	%rd1, [barrier_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r1, %tid.x;
	shl.b32 	%r2, %r1, 2;
	mov.u32 	%r3, smem;
	add.s32 	%r4, %r3, %r2;
	cvt.rn.f32.u32 	%f1, %r1;
	st.shared.f32 	[%r4], %f1;
	bar.sync 	0;
	ld.global.f32 	%f2, [%rd2];    // independent of everything above, still stays below
	ld.shared.f32 	%f3, [%r4+4];
	add.f32 	%f4, %f2, %f3;
	st.global.f32 	[%rd2+4], %f4;
	ret;
}
"""


def _reload_gemm_ptx(m: int = 2, n: int = 2, k: int = 2) -> str:
    """A gemm tile as nvcc emits it when A and B are re-read after every store to C
    (which may alias them): per C element, `ld a; ld b; fma` k times, then the store."""
    body, f = [], 0
    for i in range(m):
        for j in range(n):
            acc = "0f00000000"
            for p in range(k):
                body += [f"ld.global.f32 \t%f{f + 1}, [%rd4+{4 * (i * k + p)}];",
                         f"ld.global.f32 \t%f{f + 2}, [%rd5+{4 * (p * n + j)}];",
                         f"fma.rn.f32 \t%f{f + 3}, %f{f + 1}, %f{f + 2}, {acc};"]
                acc, f = f"%f{f + 3}", f + 3
            body.append(f"st.global.f32 \t[%rd6+{4 * (i * n + j)}], {acc};")
    params = ",\n".join(f"\t.param .u64 g_param_{q}" for q in range(3))
    head = [f".reg .f32 \t%f<{f + 1}>;", ".reg .b64 \t%rd<7>;"]
    head += [f"ld.param.u64 \t%rd{q + 1}, [g_param_{q}];" for q in range(3)]
    head += [f"cvta.to.global.u64 \t%rd{q + 4}, %rd{q + 1};" for q in range(3)]
    lines = "".join(f"\t{x}\n" for x in head + body + ["ret;"])
    return HEAD + f".visible .entry g(\n{params}\n)\n{{\n{lines}}}\n"


LOC_PTX = HEAD + """.visible .entry loc(
	.param .u64 loc_param_0
)
{
	.reg .f32 	%f<4>;
	.reg .b64 	%rd<3>;

	ld.param.u64 	%rd1, [loc_param_0];
	.loc	1 3 5
	mov.f32 	%f1, 0f3F800000;
	cvta.to.global.u64 	%rd2, %rd1;
	.loc	1 4 5
	ld.global.f32 	%f2, [%rd2];
	add.f32 	%f3, %f2, %f1;
	st.global.f32 	[%rd2], %f3;
	ret;
}
"""


# --------------------------------------------------------------------------- helpers


@functools.cache
def _original(path: Path) -> Module:
    """The parsed kernel (cached: parsing a 16x16x16 tile takes seconds). Never edited."""
    return parse(path.read_text(), str(path))


@functools.cache
def _variant(path: Path, strategy: str) -> tuple[int, Module]:
    module = _original(path).copy()
    return apply(module, strategy), module


def _reordered(text: str, strategy: str) -> tuple[int, Module, Module]:
    original = parse(text)
    module = original.copy()
    return apply(module, strategy), original, module


_ptxas_results: dict[str, tuple[int, str]] = {}


def _ptxas(text: str) -> tuple[int, str]:
    """(returncode, stderr) of ptxas on ``text``; cached by content across tests."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    if digest not in _ptxas_results:
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "k.ptx"
            src.write_text(text)
            run = subprocess.run([PTXAS, "-arch=sm_90", str(src), "-o", str(Path(tmp) / "k.o")],
                                 capture_output=True, text=True, timeout=300)
        _ptxas_results[digest] = (run.returncode, run.stderr.strip())
    return _ptxas_results[digest]


def _position(module: Module) -> dict[int, tuple[str, int]]:
    """id(line) -> (function name, body index)."""
    return {id(line): (fn.name, i) for fn in module.functions for i, line in enumerate(fn.body)}


def _check_schedule(original: Module, result: Module) -> None:
    """Per block: a permutation of the same lines, every DAG edge kept, fences unmoved;
    labels and everything outside blocks unmoved."""
    where = _position(result)
    for fn, new_fn in zip(original.functions, result.functions):
        assert len(fn.body) == len(new_fn.body)
        info = PointerInfo(fn)
        in_block = set()
        for block in basic_blocks(fn):
            in_block.update(block)
            old = [id(fn.body[i]) for i in block]
            new = [id(new_fn.body[i]) for i in block]
            assert Counter(old) == Counter(new), f"{fn.name}: block {block} is not a permutation"
            texts = Counter(fn.body[i].render() for i in block)
            assert texts == Counter(new_fn.body[i].render() for i in block)
            dag = build_dag(fn, block, info)
            pos = [where[id(fn.body[a])][1] for a in dag.anchors]
            for a, b in dag.edges():
                assert pos[a] < pos[b], (f"{fn.name}: edge broken: "
                                         f"{fn.body[dag.anchors[a]].render().strip()!r} -> "
                                         f"{fn.body[dag.anchors[b]].render().strip()!r}")
            for k, kind in enumerate(dag.kinds):
                if kind in FENCE_KINDS:  # same place, same lines before it
                    i = dag.anchors[k]
                    assert new_fn.body[i] is fn.body[i]
                    assert set(old[:i - block.start]) == set(new[:i - block.start])
        for i, line in enumerate(fn.body):  # labels and anything between blocks
            if i not in in_block:
                assert new_fn.body[i] is line
            if isinstance(line.stmt, Label):
                assert new_fn.body[i] is line


def _order(module: Module, fragment: str) -> int:
    """Body index of the (single) line containing ``fragment``."""
    hits = [i for i, ln in enumerate(module.functions[0].body) if fragment in ln.render()]
    assert len(hits) == 1, (fragment, hits)
    return hits[0]


# --------------------------------------------------------------------------- the suite


@needs_suite
@needs_ptxas
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_suite_kernel_assembles(strategy):
    changed = {p.stem: _variant(p, strategy) for p in KERNELS}
    texts = [m.render() for n, m in changed.values() if n]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(_ptxas, texts))
    names = [name for name, (n, _) in changed.items() if n]
    failed = {name: err for name, (rc, err) in zip(names, results) if rc != 0}
    assert not failed, failed


@needs_suite
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_suite_schedules_are_legal_permutations(strategy):
    for path in KERNELS:
        changed, result = _variant(path, strategy)
        if changed:
            _check_schedule(_original(path), result)
        else:
            assert result.render() == _original(path).render()


@needs_suite
def test_suite_kernels_reach_both_fences_and_change():
    """Sanity on the suite itself: critical_path changes every kernel, and the checks
    above did see bar.sync fences (the many-thread kernels have them)."""
    saw_bar = False
    for path in KERNELS:
        assert _variant(path, "critical_path")[0] > 0, path.stem
        saw_bar |= any(ins.op == "bar" for ins in _original(path).entry().instructions())
    assert saw_bar


def _regions(module: Module) -> list[list[str]]:
    """Opcodes of each store-free stretch of the entry (split at st.global)."""
    out: list[list[str]] = [[]]
    for ins in module.entry().instructions():
        if ins.opcode.startswith("st.global"):
            out.append([])
        else:
            out[-1].append(ins.opcode)
    return out


def _loads_before_fmas(region: list[str]) -> bool:
    loads = [i for i, op in enumerate(region) if op.startswith("ld.global")]
    fmas = [i for i, op in enumerate(region) if op.startswith("fma")]
    return not loads or not fmas or max(loads) < min(fmas)


@needs_suite
def test_loads_first_on_suite_gemm_tile_4x4x4():
    """The suite's tile already loads A and B up front; loads_first keeps that, keeps the
    loads in source order, and sinks the C address (cvta of param 2) below them."""
    path = ROOT / "harness" / "kernels" / "gemm_tile_4x4x4.ptx"
    if not path.exists():
        pytest.skip("gemm_tile_4x4x4.ptx not in the suite")
    changed, result = _variant(path, "loads_first")
    assert changed == 1  # one basic block: the whole unrolled tile
    regions = _regions(result)
    assert len(regions) == 4 * 4 + 1  # 16 stores; the last stretch is `ret`
    assert all(map(_loads_before_fmas, regions))
    loads = [ins.render() for ins in result.entry().instructions() if ins.op == "ld"]
    assert loads == [ins.render() for ins in _original(path).entry().instructions()
                     if ins.op == "ld"]
    assert sum(op.startswith("ld.global") for op in regions[0]) == 2 * 4 * 4
    first_fma = regions[0].index("fma.rn.f32")
    assert regions[0][first_fma - 1] == "cvta.to.global.u64"  # the C pointer, now last


def test_loads_first_hoists_loads_above_fmas_between_stores():
    """nvcc's form when A, B are reloaded after every store to C (they may alias): loads
    and fmas alternate; loads_first gathers each stretch's loads above its fmas, and no
    load crosses a store."""
    changed, original, result = _reordered(_reload_gemm_ptx(), "loads_first")
    assert changed == 1
    _check_schedule(original, result)
    before, after = _regions(original), _regions(result)
    assert len(before) == len(after) == 2 * 2 + 1
    assert not any(map(_loads_before_fmas, before[1:-1]))
    assert all(map(_loads_before_fmas, after))
    for old, new in zip(before, after):
        assert sorted(old) == sorted(new)  # nothing crossed a store
    if PTXAS:
        assert _ptxas(result.render())[0] == 0


@needs_suite
def test_deterministic_on_suite():
    for path in KERNELS:
        if path.stat().st_size > 100_000:  # the big tiles: same code path, slow to schedule
            continue
        for strategy in STRATEGIES:  # a second run from the same input: same text
            again = _original(path).copy()
            apply(again, strategy)
            assert again.render() == _variant(path, strategy)[1].render(), (path.stem, strategy)


# --------------------------------------------------------------------------- hand-written


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_possibly_aliasing_load_stays_below_store(strategy):
    changed, original, result = _reordered(ALIAS_PTX, strategy)
    _check_schedule(original, result)
    store = _order(result, "st.global.f32 \t[%rd3]")
    assert _order(result, "%f4, [%rd4]") > store
    assert _order(result, "%f6, [%rd3];") > store
    if changed and PTXAS:
        assert _ptxas(result.render())[0] == 0


def test_disjoint_load_through_same_base_moves_above_store():
    # (critical_path keeps it below: the chain through the store is longer, rightly.)
    changed, original, result = _reordered(ALIAS_PTX, "loads_first")
    assert changed == 1
    assert _order(original, "[%rd3+4]") > _order(original, "st.global.f32 \t[%rd3]")
    assert _order(result, "[%rd3+4]") < _order(result, "st.global.f32 \t[%rd3]")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_nothing_crosses_bar_sync(strategy):
    changed, original, result = _reordered(BARRIER_PTX, strategy)
    _check_schedule(original, result)
    bar = _order(original, "bar.sync")
    assert _order(result, "bar.sync") == bar
    before = {ln.render() for ln in original.functions[0].body[:bar]}
    assert before == {ln.render() for ln in result.functions[0].body[:bar]}
    if changed and PTXAS:
        assert _ptxas(result.render())[0] == 0


def test_loc_lines_travel_with_their_instruction():
    changed, original, result = _reordered(LOC_PTX, "critical_path")
    assert changed == 1
    body = [ln.render().strip() for ln in result.functions[0].body]
    assert body[body.index("ld.global.f32 \t%f2, [%rd2];") - 1] == ".loc\t1 4 5"
    assert body[body.index("mov.f32 \t%f1, 0f3F800000;") - 1] == ".loc\t1 3 5"
    _check_schedule(original, result)


def _dag_of(text: str):
    """(dag, node number by instruction text without ';') of the entry's first block."""
    fn = parse(text).entry()
    dag = build_dag(fn, basic_blocks(fn)[0], PointerInfo(fn))
    return dag, {fn.body[a].stmt.render().rstrip(";"): k for k, a in enumerate(dag.anchors)}


def test_dag_memory_edges_and_priorities():
    dag, node = _dag_of(ALIAS_PTX)
    ld1, add, mul = node["ld.global.f32 \t%f1, [%rd3]"], node["add.f32 \t%f2, %f1, 0f3F800000"], \
        node["mul.f32 \t%f3, %f2, %f2"]
    st, ld4, ld5 = node["st.global.f32 \t[%rd3], %f3"], node["ld.global.f32 \t%f4, [%rd4]"], \
        node["ld.global.f32 \t%f5, [%rd3+4]"]
    assert add in dag.succs[ld1] and mul in dag.succs[add] and st in dag.succs[mul]  # RAW
    assert st in dag.preds[ld4]  # another param's pointer: may alias
    fences = {k for k, kind in enumerate(dag.kinds) if kind == "fence"}  # the .reg lines
    assert dag.preds[ld5] - fences == {node["cvta.to.global.u64 \t%rd3, %rd1"]}  # disjoint
    assert dag.kinds[-1] == "terminator"
    assert all(dag.succs[k] for k in range(len(dag) - 1))  # everything reaches `ret`
    assert dag.latency[ld1] == 400 and dag.latency[add] <= 6
    cp = dag.critical_path_lengths()
    assert cp[ld1] >= 400 + cp[add] and cp[add] > cp[mul] > cp[st]


def test_dag_register_edges():
    dag, node = _dag_of(HEAD + ".visible .entry t()\n{\n\t.reg .b32 %r<4>;\n\t.reg .pred %p<2>;\n"
                        "\tmov.u32 %r1, 1;\n\tadd.s32 %r2, %r1, 1;\n\tmov.u32 %r1, 2;\n"
                        "\tsetp.eq.s32 %p1, %r2, 3;\n\t@%p1 mov.u32 %r1, 3;\n\tret;\n}\n")
    mov1, add, mov2 = node["mov.u32 %r1, 1"], node["add.s32 %r2, %r1, 1"], node["mov.u32 %r1, 2"]
    setp, guarded = node["setp.eq.s32 %p1, %r2, 3"], node["@%p1 mov.u32 %r1, 3"]
    assert add in dag.succs[mov1]  # RAW
    assert mov2 in dag.succs[add]  # WAR: %r1 redefined after add reads it
    assert mov2 in dag.succs[mov1]  # WAW
    assert guarded in dag.succs[setp]  # the guard is a read
    assert guarded in dag.succs[mov2]  # WAW: the guarded def may keep mov2's value
    assert dag.kinds[:2] == ["fence", "fence"]  # the .reg directives
    assert schedule(dag, "critical_path")[:2] == [0, 1]


def test_registered_transform():
    t = registry()["reorder"]
    assert t.group == "schedule"
    assert t.param("strategy").choices == STRATEGIES
    assert t.param("strategy").default == "critical_path"
    module = parse(ALIAS_PTX)
    assert t.run(module, {}) == 1
    with pytest.raises(ValueError):
        schedule(build_dag(module.entry(), basic_blocks(module.entry())[0],
                           PointerInfo(module.entry())), "random")


def test_unchanged_module_untouched():
    straight = HEAD + ".visible .entry s()\n{\n\tret;\n}\n"
    for strategy in STRATEGIES:
        changed, original, result = _reordered(straight, strategy)
        assert changed == 0 and result.render() == straight
