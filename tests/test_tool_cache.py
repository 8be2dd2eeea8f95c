"""harness.tool_cache through the real ptxas and cuobjdump: an answer asked for again is
read back (the tool is not run: a wrapper counts its runs), equal to the first; another
input, other arguments or another tool binary is asked anew; timeouts are never kept; a
damaged file is a miss; EVO_TOOL_CACHE=off keeps nothing; threads share one answer."""

from __future__ import annotations

import concurrent.futures
import os
import stat

import pytest

from harness import tool_cache, toolchain
from harness.compile import compile_ptx
from harness.kernels.suite import find_kernel

from conftest import needs_ptxas

pytestmark = needs_ptxas


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """EVO_PTXAS set to a wrapper that counts its runs, then runs the real ptxas; the cache
    in a folder of its own. Returns a function giving the count."""
    real = toolchain.find_ptxas()
    log = tmp_path / "runs.txt"
    wrapper = tmp_path / "bin" / "ptxas"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\necho run >> {log}\nexec {real} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("EVO_PTXAS", str(wrapper))
    monkeypatch.setenv("EVO_TOOL_CACHE", str(tmp_path / "cache"))
    toolchain.clear_cache()
    yield lambda: len(log.read_text().splitlines()) if log.exists() else 0
    toolchain.clear_cache()


def _ptx(name: str = "gemm_tile_2x2x2") -> str:
    return find_kernel(name).ptx_text()


def test_the_same_question_is_answered_from_the_cache_with_the_same_answer(counted, tmp_path):
    first = compile_ptx(_ptx())
    second = compile_ptx(_ptx())
    assert counted() == 1
    assert first.ok and second.cubin == first.cubin and second.log == first.log
    assert (second.registers, second.functions) == (first.registers, first.functions)
    assert len(list((tmp_path / "cache").rglob("*"))) == 2  # one folder, one answer
    compile_ptx(_ptx("gemm_tile_4x4x4"))  # another input
    compile_ptx(_ptx(), opt_level=1)  # other arguments
    assert counted() == 3


def test_an_error_is_kept_but_a_timeout_is_not(counted, tmp_path):
    broken = _ptx().replace("ret;", "bogus_opcode;", 1)
    for _ in range(2):
        failed = compile_ptx(broken)
        assert not failed.ok and "bogus_opcode" in failed.error
    assert counted() == 1  # ptxas' verdict on the input: kept
    slow = tmp_path / "bin" / "ptxas"
    slow.write_text(f"#!/bin/sh\necho run >> {tmp_path / 'runs.txt'}\nsleep 5\n")
    toolchain.clear_cache()  # another binary now: another key
    for _ in range(2):
        out = compile_ptx(_ptx(), timeout=0.3)
        assert not out.ok and "timed out" in out.error
    assert counted() == 3  # a timeout says nothing about the input: asked again


def test_a_crash_of_ptxas_is_its_own_failure_and_is_not_kept(counted, tmp_path):
    broken = _ptx().replace("ret;", "bogus_opcode;", 1)
    assert compile_ptx(broken).tool_failed is False  # the PTX's fault: ptxas named it
    crashing = tmp_path / "bin" / "ptxas"
    crashing.write_text(f"#!/bin/sh\necho run >> {tmp_path / 'runs.txt'}\necho 'Segmentation "
                        "fault (core dumped)' >&2\nexit 139\n")
    toolchain.clear_cache()
    for _ in range(2):
        out = compile_ptx(_ptx())
        assert not out.ok and out.tool_failed and "status 139" in out.error
    assert counted() == 3  # asked again each time: a crash says nothing about the input
    killed = tmp_path / "bin" / "ptxas"
    killed.write_text("#!/bin/sh\nkill -9 $$\n")
    toolchain.clear_cache()
    assert compile_ptx(_ptx()).tool_failed


def test_a_damaged_answer_is_a_miss_and_off_keeps_nothing(counted, tmp_path, monkeypatch):
    compile_ptx(_ptx())
    (kept,) = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    kept.write_bytes(kept.read_bytes()[:40])
    assert compile_ptx(_ptx()).ok and counted() == 2
    monkeypatch.setenv("EVO_TOOL_CACHE", tool_cache.OFF)
    compile_ptx(_ptx("relu"))
    compile_ptx(_ptx("relu"))
    assert counted() == 4


def test_threads_asking_at_once_get_one_answer(counted):
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: compile_ptx(_ptx()), range(8)))
    assert len({r.cubin for r in results}) == 1 and all(r.ok for r in results)
    assert compile_ptx(_ptx()).cubin == results[0].cubin


def test_the_disassembly_is_kept_too(tmp_path, monkeypatch):
    from harness import sass

    monkeypatch.setenv("EVO_TOOL_CACHE", str(tmp_path / "cache"))
    cubin = compile_ptx(_ptx()).cubin
    first = sass.disassemble(cubin)
    if first is None:
        pytest.skip("no cuobjdump here")
    files = {p for p in (tmp_path / "cache").rglob("*") if p.is_file()}
    assert len(files) == 2  # the cubin's ptxas answer and its disassembly
    assert sass.disassemble(cubin) == first


def test_the_folder_is_pruned_least_recently_used_first(tmp_path, monkeypatch):
    monkeypatch.setenv("EVO_TOOL_CACHE", str(tmp_path / "cache"))
    names = [f"{i:02x}" + "a" * 62 for i in range(1, 11)]
    for i, name in enumerate(names):
        tool_cache.keep(name, 0, "", b"x" * 100_000)
        os.utime(tool_cache._path(name), (1000 + i, 1000 + i))  # written in this order
    assert tool_cache.lookup(names[0]) is not None  # used now: the most recent
    assert tool_cache.prune(limit_mb=10) == 0  # 1 MB in a 10 MB folder
    removed = tool_cache.prune(limit_mb=0.5)  # 1 MB > 0.5 MB: down to 0.375 MB
    assert removed == 7
    left = {n for n in names if tool_cache._path(n).exists()}
    assert left == {names[0], names[8], names[9]}
