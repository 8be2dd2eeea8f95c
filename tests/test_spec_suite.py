"""Kernel specs and the suite: every spec loads, every PTX assembles, errors name the key."""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from genomes.errors import EvoError
from harness.kernels.catalog import catalog
from harness.kernels.reference import REFERENCES, random_inputs, run_reference
from harness.kernels.regenerate import spec_toml
from harness.kernels.spec import BufferParam, KernelSpec, ScalarParam, SpecError, load_spec
from harness.kernels.spec_ptx import check_ptx, ptx_entries, spec_skeleton
from harness.kernels.suite import UnknownKernelError, find_kernel, gemm_tiles, list_kernels, suite_dir

SUITE = list_kernels()
NAMES = [spec.name for spec in SUITE]
NON_GEMM = [s for s in SUITE if not s.name.startswith("gemm_tile_")]


def test_suite_contents():
    assert len(SUITE) == 64 + 4 + len(NON_GEMM) and len(NON_GEMM) >= 10
    assert NAMES[:3] == ["gemm_tile_2x2x2", "gemm_tile_2x2x4", "gemm_tile_2x2x6"]
    assert NAMES[64:68] == [f"gemm_tile_{s}x{s}x{s}" for s in (10, 12, 14, 16)]
    assert gemm_tiles() == NAMES[:64] and len(set(gemm_tiles())) == 64
    # the *_dram kernels share the PTX of their L2-sized namesakes
    assert {p.stem for p in suite_dir().glob("*.ptx")} == {s.ptx_path.stem for s in SUITE}
    assert {s.name for s in SUITE if s.ptx_path.stem != s.name} == {
        f"{k}_dram" for k in ("relu", "gelu", "saxpy", "softmax", "layernorm")}


def test_every_spec_matches_its_ptx_and_catalog():
    for spec in SUITE:
        check_ptx(spec)
        assert spec.spec_path.read_text() == spec_toml(next(e for e in catalog() if e["name"] == spec.name))
        assert spec.reference in REFERENCES
        assert spec.timing == ("clock64" if spec.blocks == 1 else "events")


def test_gemm_spec_shape():
    spec = find_kernel("gemm_tile_4x6x8")
    assert (spec.grid, spec.block, spec.threads, spec.timing) == ((1, 1, 1), (1, 1, 1), 1, "clock64")
    assert [(p.name, p.count, p.role) for p in spec.buffers()] == [("A", 32, "in"), ("B", 48, "in"), ("C", 24, "out")]
    assert [p.name for p in spec.outputs()] == ["C"]
    assert dict(spec.meta) == {"m": 4, "n": 6, "k": 8}
    assert spec.numpy_dtype("f32") == np.float32 and spec.ptx_path.is_absolute()


def test_gemm_ptx_is_scalar_constant_offset_loads():
    text = find_kernel("gemm_tile_4x4x4").ptx_text()
    loads = [line.split() for line in text.splitlines() if line.strip().startswith("ld.global")]
    assert len(loads) == 4 * 4 + 4 * 4  # each element of A and B read once, before any store
    assert all(op == "ld.global.f32" for op, *_ in loads)
    assert ["ld.global.f32", "%f2,", "[%rd4+4];"] in loads
    first_store = next(i for i, ln in enumerate(text.splitlines()) if "st.global" in ln)
    last_load = max(i for i, ln in enumerate(text.splitlines()) if "ld.global" in ln)
    assert last_load < first_store
    assert "__restrict__" not in text and "ld.global.nc" not in text


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
def test_every_ptx_assembles(tmp_path):
    def assemble(spec: KernelSpec) -> tuple[str, int, str]:
        out = tmp_path / f"{spec.name}.cubin"
        proc = subprocess.run(["ptxas", "-arch=sm_90", str(spec.ptx_path), "-o", str(out)],
                              capture_output=True, text=True, timeout=300)
        return spec.name, proc.returncode, proc.stderr

    # Largest first, so the slow 16x16x16 does not start last.
    specs = sorted(SUITE, key=lambda s: -s.ptx_path.stat().st_size)
    with ThreadPoolExecutor(4) as pool:
        failures = [r for r in pool.map(assemble, specs) if r[1] != 0]
    assert not failures


def _write(tmp_path: Path, body: str, ptx: str = "gemm_tile_2x2x2") -> Path:
    shutil.copy(suite_dir() / f"{ptx}.ptx", tmp_path / "k.ptx")
    path = tmp_path / "k.toml"
    path.write_text(body)
    return path


GOOD = spec_toml(next(e for e in catalog() if e["name"] == "gemm_tile_2x2x2")).replace(
    'ptx = "gemm_tile_2x2x2.ptx"', 'ptx = "k.ptx"')


@pytest.mark.parametrize("old, new, words", [
    ('shared_mem = 0', 'shared_men = 0', ["unknown key 'shared_men'", "did you mean 'shared_mem'"]),
    ('dtype = "f32"', 'dtype = "float"', ["'dtype'", "'float'"]),
    ('count = 4', 'count = -4', ["'count'", "positive"]),
    ('count = 4', 'count = 4.0', ["'count'"]),
    ('block = [1, 1, 1]', 'block = [64, 32, 1]', ["block", "2048 threads", "1024"]),
    ('grid = [1, 1, 1]', 'grid = [1, 1]', ["'grid'", "3 positive ints"]),
    ('role = "in"', 'role = "input"', ["'role'", "'input'"]),
    ('fill = "normal"', 'fill = "gauss"', ["'fill'", "'gauss'"]),
    ('fill = "normal"', 'fill = "normal"\nlow = 1', ["'low'", "fill = 'normal'"]),
    ('timing = "clock64"', 'timing = "cycles"', ["'timing'", "clock64"]),
    ('grid = [1, 1, 1]', 'grid = [4, 1, 1]', ["clock64", "events"]),
    ('reference = "gemm"', 'reference = "gemmm"', ["reference", "did you mean 'gemm'"]),
    ('kind = "buffer"', 'knd = "buffer"', ["unknown key 'knd'", "'kind'"]),
    ('[tolerance]\n', '[tolerance]\nrtl = 1\n', ["[tolerance]", "unknown key 'rtl'", "'rtol'"]),
    ('role = "out"', 'role = "in"', ["no output buffer"]),
    ('ptx = "k.ptx"', 'ptx = "missing.ptx"', ["missing.ptx", "not found"]),
    ('name = "A"', 'name = "B"', ["'B'", "twice"]),
    ('count = 4', 'count = "TODO"', ["'count'", "TODO"]),
    ('timing = "clock64"', 'timing = ', ["not valid TOML"]),
    ('timing = "clock64"', 'timing = "clock64"\ncaches = "hot"', ["'caches'", "'hot'", "cold"]),
])
def test_bad_spec_names_the_key(tmp_path, old, new, words):
    assert old in GOOD
    path = _write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(SpecError) as err:
        load_spec(path)
    message = str(err.value)
    assert str(path) in message and "\n" not in message
    for word in words:
        assert word in message
    assert isinstance(err.value, EvoError)


def test_caches_chooses_warm_or_cold_timing_and_cold_figures_are_stored_apart(tmp_path):
    from harness.kernels.spec import with_caches

    warm = load_spec(_write(tmp_path, GOOD))
    assert warm.caches == "warm" and warm.store_name == warm.name
    cold = load_spec(_write(tmp_path, GOOD.replace('timing = "clock64"',
                                                    'timing = "clock64"\ncaches = "cold"')))
    assert cold.caches == "cold" and cold.store_name == f"{cold.name}@cold"
    assert with_caches(warm, "spec") is warm and with_caches(cold, "warm").caches == "warm"
    assert with_caches(warm, "cold").store_name == cold.store_name
    with pytest.raises(SpecError, match="lukewarm"):
        with_caches(warm, "lukewarm")


def test_scalar_and_fill_validation(tmp_path):
    body = GOOD + '\n[[params]]\nname = "n"\nkind = "scalar"\ndtype = "u32"\nvalue = -1\n'
    with pytest.raises(SpecError, match="'value'"):
        load_spec(_write(tmp_path, body))
    with pytest.raises(SpecError, match="unknown key 'count'"):
        load_spec(_write(tmp_path, body.replace("value = -1", "value = 1\ncount = 3")))
    body = GOOD.replace('fill = "normal"', 'fill = "int"\nlow = 3\nhigh = 3', 1)
    with pytest.raises(SpecError, match="low < high"):
        load_spec(_write(tmp_path, body))


def test_check_ptx_catches_signature_mismatch(tmp_path):
    body = GOOD + '\n[[params]]\nname = "n"\nkind = "scalar"\ndtype = "u32"\nvalue = 1\n'
    spec = load_spec(_write(tmp_path, body))
    with pytest.raises(SpecError, match="4 params but PTX entry 'gemm_tile_2x2x2' takes 3"):
        check_ptx(spec)
    spec = load_spec(_write(tmp_path, GOOD.replace('entry = "gemm_tile_2x2x2"', 'entry = "gemm_tile_2x2x3"')))
    with pytest.raises(SpecError, match="did you mean 'gemm_tile_2x2x2'"):
        check_ptx(spec)


def test_find_kernel_by_name_toml_and_ptx(tmp_path):
    by_name = find_kernel("softmax")
    assert find_kernel(by_name.spec_path) == by_name
    assert find_kernel(str(by_name.ptx_path)) == by_name
    assert find_kernel(by_name.ptx_path) == by_name
    lonely = tmp_path / "lonely.ptx"
    lonely.write_text(by_name.ptx_text())
    with pytest.raises(SpecError, match="lonely.toml.*init-kernel"):
        find_kernel(lonely)
    with pytest.raises(SpecError, match="no such"):
        find_kernel(tmp_path / "absent.toml")


def test_find_kernel_unknown_name_suggests():
    with pytest.raises(UnknownKernelError, match="gemm_tile_4x6x8") as err:
        find_kernel("gemm_tile_4x6x9")
    assert str(err.value).split("did you mean")[1].count("gemm_tile_") == 3 and isinstance(err.value, EvoError)
    with pytest.raises(UnknownKernelError, match="did you mean softmax"):
        find_kernel("sofmax")


def test_skeleton_round_trips(tmp_path):
    ptx = find_kernel("layernorm").ptx_text()
    skeleton = spec_skeleton(ptx)
    (tmp_path / "layernorm.ptx").write_text(ptx)
    path = tmp_path / "layernorm.toml"
    path.write_text(skeleton)
    with pytest.raises(SpecError, match="TODO"):
        load_spec(path)
    # a kernel of many threads with no i < n guard: its launch is the user's to say
    assert 'grid = "TODO"' in skeleton and 'block = "TODO"' in skeleton
    skeleton = skeleton.replace('grid = "TODO"', "grid = [1024, 1, 1]").replace(
        'block = "TODO"', "block = [256, 1, 1]")
    filled = skeleton.replace('count = "TODO"', "count = 1024").replace('value = "TODO"', "value = 1024", 1)
    filled = filled.replace('value = "TODO"', "value = 1e-5").replace('role = "TODO"', 'role = "in"', 3)
    path.write_text(filled.replace('role = "TODO"', 'role = "out"'))
    spec = load_spec(path)
    check_ptx(spec)
    assert spec.entry == "layernorm" and [p.kind for p in spec.params] == ["buffer"] * 4 + ["scalar"] * 2
    assert isinstance(spec.params[4], ScalarParam) and spec.params[4].dtype == "u32"
    assert spec.params[5].dtype == "f32" and [p.name for p in spec.outputs()] == ["param_3"]


def test_ptx_entries_reads_triton_signatures():
    ptx = """.visible .entry softmax_kernel(
        .param .u64 .ptr .global .align 1 softmax_kernel_param_0,
        .param .u32 softmax_kernel_param_1,
        .param .align 8 .b8 softmax_kernel_param_2[16]
    )
    { ret; }"""
    params = ptx_entries(ptx)["softmax_kernel"]
    assert [(p.name, p.ptx_type, p.bits) for p in params] == [
        ("softmax_kernel_param_0", "u64", 64), ("softmax_kernel_param_1", "u32", 32),
        ("softmax_kernel_param_2", "b8", 128)]
    # a 16-byte aggregate cannot be a spec's param (check_ptx would refuse every spec):
    # the skeleton says so instead of writing one
    with pytest.raises(SpecError, match="param_2 is 16 bytes"):
        spec_skeleton(ptx)
    with pytest.raises(SpecError, match="2 entries"):
        spec_skeleton(ptx + "\n.entry other()\n{ ret; }")


# The *_dram kernels share their namesakes' reference functions (64M elements: ~10 s each).
@pytest.mark.parametrize("spec", [s for s in NON_GEMM if not s.name.endswith("_dram")] +
                         [find_kernel(n) for n in ("gemm_tile_2x4x6", "gemm_tile_16x16x16")],
                         ids=lambda s: s.name)
def test_reference_runs_on_cpu(spec):
    inputs = random_inputs(spec, np.random.default_rng(1))
    assert set(inputs) == {p.name for p in spec.params}
    outputs = run_reference(spec, inputs)
    assert set(outputs) == {p.name for p in spec.outputs()}
    for param in spec.outputs():
        out = outputs[param.name]
        assert out.shape == (param.count,) and out.dtype == spec.numpy_dtype(param.dtype)
        assert np.isfinite(out).all()


def test_random_inputs_follow_fills():
    spec = find_kernel("embedding_gather")
    a = random_inputs(spec, np.random.default_rng(7))
    b = random_inputs(spec, np.random.default_rng(7))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert a["idx"].dtype == np.int32 and a["idx"].min() >= 0 and a["idx"].max() < 8192
    assert a["n_tokens"] == 4096 and not a["out"].any()
    var = random_inputs(find_kernel("batchnorm_infer"), np.random.default_rng(0))["var"]
    assert var.min() >= 0.5 and var.max() < 2.0
    assert isinstance(find_kernel("saxpy").param("y"), BufferParam)


@pytest.mark.gpu
def test_baselines_match_references_on_gpu():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no GPU")
    except cupy.cuda.runtime.CUDARuntimeError:
        pytest.skip("no GPU")
    from harness.kernels.check_gpu import check

    worst = {spec.name: check(spec, seeds=2)[0] for spec in SUITE}
    assert not {name: ratio for name, ratio in worst.items() if ratio > 1.0}
