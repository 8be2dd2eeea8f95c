"""Tests for harness.toolchain and harness.compile, with the real ptxas."""

from __future__ import annotations

import hashlib
import json
import os
import stat

import pytest

from harness import toolchain
from harness.compile import compile_many, compile_ptx, parse_verbose, ptx_hash
from harness.toolchain import MissingToolError, find_ptxas, ptxas_version

from conftest import needs_ptxas

HEADER = ".version 8.0\n.target sm_90\n.address_size 64\n"

# One thread: load four floats from `in`, store their sum to `out`.
SUM4 = HEADER + """
.visible .entry sum4(
    .param .u64 sum4_in,
    .param .u64 sum4_out
)
{
    .reg .f32 %f<8>;
    .reg .b64 %rd<3>;

    ld.param.u64 %rd1, [sum4_in];
    ld.param.u64 %rd2, [sum4_out];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    ld.global.f32 %f1, [%rd1];
    ld.global.f32 %f2, [%rd1+4];
    ld.global.f32 %f3, [%rd1+8];
    ld.global.f32 %f4, [%rd1+12];
    add.f32 %f5, %f1, %f2;
    add.f32 %f6, %f3, %f4;
    add.f32 %f7, %f5, %f6;
    st.global.f32 [%rd2], %f7;
    ret;
}
"""


def hungry_ptx(n: int = 48, name: str = "hungry", maxnreg: int | None = None) -> str:
    """A kernel that keeps ``n`` loaded floats live across two dependent chains.

    Volatile loads cannot be re-issued or sunk by ptxas, and the second chain
    walks the values in reverse, so all ``n`` must stay in registers (about
    56 for n=48 on sm_90).
    """
    lines = [
        f".visible .entry {name}(.param .u64 {name}_in, .param .u64 {name}_out)",
        *([f".maxnreg {maxnreg}"] if maxnreg else []),
        "{",
        f"    .reg .f32 %f<{3 * n}>;",
        "    .reg .b64 %rd<3>;",
        f"    ld.param.u64 %rd1, [{name}_in];",
        f"    ld.param.u64 %rd2, [{name}_out];",
    ]
    lines += [f"    ld.global.volatile.f32 %f{i}, [%rd1+{4 * i}];" for i in range(n)]
    lines.append(f"    mov.f32 %f{n}, %f0;")
    lines += [f"    fma.rn.f32 %f{n + i}, %f{n + i - 1}, %f{n + i - 1}, %f{i};" for i in range(1, n)]
    lines.append(f"    st.global.volatile.f32 [%rd2], %f{2 * n - 1};")
    lines.append(f"    mov.f32 %f{2 * n}, %f{n - 1};")
    lines += [
        f"    fma.rn.f32 %f{2 * n + i}, %f{2 * n + i - 1}, %f{n - 1 - i}, %f{n - 1 - i};"
        for i in range(1, n)
    ]
    lines += [f"    st.global.f32 [%rd2+4], %f{3 * n - 1};", "    ret;", "}"]
    return HEADER + "\n".join(lines) + "\n"


@pytest.fixture(autouse=True)
def _fresh_lookups():
    """Tool lookups are cached; tests that change the environment need them redone."""
    toolchain.clear_cache()
    yield
    toolchain.clear_cache()


def test_compiles_sum4_and_reports_resources():
    result = compile_ptx(SUM4)
    assert result.ok, result.log
    assert result.error is None
    assert result.cubin.startswith(b"\x7fELF")
    assert result.registers > 0
    assert result.spill_stores == result.spill_loads == result.stack_frame == 0
    assert result.arch == "sm_90"
    assert list(result.functions) == ["sum4"] and result.functions["sum4"].is_entry
    assert "Used" in result.log and result.seconds > 0
    json.dumps(result.summary())  # plain JSON for events and the store


def test_syntax_error_is_a_result_naming_the_line():
    bad = SUM4.replace("add.f32 %f6, %f3, %f4;", "add.f32 %f6, %f3, %f4, %f5, %f9;")
    bad_line = bad.splitlines().index("    add.f32 %f6, %f3, %f4, %f5, %f9;") + 1
    result = compile_ptx(bad)
    assert not result.ok
    assert result.cubin is None and result.registers is None
    assert f"line {bad_line}" in result.error
    assert "kernel.ptx" not in result.error  # the temp file name is noise
    assert "aborted" not in result.error  # ptxas's closing line adds nothing


def test_unknown_arch_is_a_result():
    result = compile_ptx(SUM4, arch="sm_999")
    assert not result.ok and "sm_999" in result.error


def test_timeout_is_a_result(monkeypatch):
    monkeypatch.setenv("EVO_TOOL_CACHE", "off")  # a kept answer would need no ptxas run at all
    result = compile_ptx(hungry_ptx(), timeout=1e-4)
    assert not result.ok and "timed out" in result.error


def test_maxnreg_directive_is_honoured():
    natural = compile_ptx(hungry_ptx())
    capped = compile_ptx(hungry_ptx(maxnreg=32))
    assert natural.ok and capped.ok
    assert natural.registers > 32  # the cap has to bite for the test to mean anything
    assert capped.registers <= 32


def test_register_cap_spills():
    # sm_90 raises any cap below 24 to 24 (with a warning); 48 live floats still spill.
    result = compile_ptx(hungry_ptx(), extra_args=["-maxrregcount=16"])
    assert result.ok, result.log
    assert result.spilled
    assert result.spill_stores > 0 and result.spill_loads > 0 and result.stack_frame > 0
    assert any("lower bound" in w for w in result.warnings)


def test_multi_entry_top_level_is_first_ptx_entry():
    # ptxas reports entries in its own order (here: last first); the top level must
    # still describe the first entry of the PTX.
    body = hungry_ptx(name="big").replace(HEADER, "")
    result = compile_ptx(SUM4 + body)
    assert result.ok
    assert list(result.functions) == ["sum4", "big"]
    assert result.registers == result.functions["sum4"].registers
    assert result.functions["big"].registers > result.registers


def test_parse_verbose_older_format_with_cmem():
    log = """ptxas info    : 8 bytes gmem, 16 bytes cmem[3]
ptxas info    : Compiling entry function '_Z4gemmPfS_' for 'sm_80'
ptxas info    : Function properties for _Z4gemmPfS_
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 356 bytes cmem[0], 1024 bytes smem
ptxas info    : Function properties for helper
    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""
    functions, gmem = parse_verbose(log, ["_Z4gemmPfS_"])
    gemm = functions["_Z4gemmPfS_"]
    assert gmem == 8
    assert (gemm.registers, gemm.barriers, gemm.shared_mem) == (40, 1, 1024)
    assert (gemm.stack_frame, gemm.spill_stores, gemm.spill_loads) == (8, 4, 12)
    assert gemm.const_mem == {0: 356}
    assert not functions["helper"].is_entry and functions["helper"].stack_frame == 16


def test_compile_many_preserves_order():
    names = [f"k{i}" for i in range(6)]
    sources = [hungry_ptx(n=8 + 8 * i, name=name) for i, name in enumerate(names)]
    results = compile_many(sources, "sm_90", workers=3)
    assert [next(iter(r.functions)) for r in results] == names
    assert all(r.ok for r in results)
    assert compile_many([], "sm_90") == []


def test_ptx_hash_is_exact_sha256():
    assert ptx_hash(SUM4) == hashlib.sha256(SUM4.encode()).hexdigest()
    assert ptx_hash(SUM4) != ptx_hash(SUM4 + " ")


def test_ptxas_version():
    assert ptxas_version()[0].isdigit()


def test_evo_ptxas_missing_file_is_clear(monkeypatch, tmp_path):
    missing = tmp_path / "no-such-ptxas"
    monkeypatch.setenv("EVO_PTXAS", str(missing))
    with pytest.raises(MissingToolError, match="EVO_PTXAS") as info:
        compile_ptx(SUM4)
    assert str(missing) in str(info.value)


def test_evo_ptxas_override_is_used(monkeypatch):
    real = find_ptxas()
    toolchain.clear_cache()
    monkeypatch.setenv("EVO_PTXAS", str(real))
    monkeypatch.setenv("PATH", "")
    assert find_ptxas() == real.resolve()
    assert compile_ptx(SUM4).ok


def test_no_ptxas_anywhere_says_how_to_install(monkeypatch):
    monkeypatch.delenv("EVO_PTXAS", raising=False)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(toolchain, "_nvidia_package_dirs", lambda: [])
    with pytest.raises(MissingToolError) as info:
        compile_many([SUM4, SUM4])
    message = str(info.value)
    assert "nvidia-cuda-nvcc" in message and "EVO_PTXAS" in message
    assert "\n" not in message


@pytest.mark.parametrize("layout", ["cu13/bin", "cuda_nvcc/bin"])
def test_pip_wheel_layouts_are_found(monkeypatch, tmp_path, layout):
    fake = tmp_path / "nvidia" / layout / "ptxas"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.delenv("EVO_PTXAS", raising=False)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(toolchain, "_nvidia_package_dirs", lambda: [tmp_path / "nvidia"])
    assert find_ptxas() == fake
    assert os.access(find_ptxas(), os.X_OK)


@needs_ptxas
def test_a_variant_and_its_twin_are_optimized_side_by_side_to_the_same_code(monkeypatch, tmp_path):
    """A module of two entries (a variant and its clock64 twin) goes to ptxas with
    --split-compile where it takes it: the machine code is what one thread makes."""
    import subprocess

    from harness import compile as compile_mod
    from harness.gpu.instrument import with_clock_twin
    from harness.kernels.suite import find_kernel
    from harness.sass import cubin_text_hash
    from harness.toolchain import find_ptxas

    monkeypatch.setenv("EVO_TOOL_CACHE", "off")
    spec = find_kernel("gemm_tile_4x6x8")
    twin = with_clock_twin(spec.ptx_text(), spec.entry)
    ptxas = find_ptxas()
    assert compile_mod._split(ptxas, spec.ptx_text()) == ()  # one entry: nothing to split
    if not compile_mod._splits(str(ptxas)):
        pytest.skip("this ptxas has no --split-compile")
    assert compile_mod._split(ptxas, twin) == ("--split-compile", "2")
    split = compile_ptx(twin)
    assert split.ok and "--split-compile" not in split.args  # not in the cache's key
    (tmp_path / "k.ptx").write_text(twin)
    subprocess.run([str(ptxas), "-arch=sm_90", "-O3", "k.ptx", "-o", "k.cubin"], cwd=tmp_path, check=True)
    assert cubin_text_hash(split.cubin) == cubin_text_hash((tmp_path / "k.cubin").read_bytes())
