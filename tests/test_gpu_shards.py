"""harness.tools.gpu_shards on the CPU: test files dealt to shards, largest first to the
lightest; the gpu-marked files it would deal are collected here too (none run)."""

from __future__ import annotations

from harness.tools.gpu_shards import deal, gpu_test_files


def test_files_are_dealt_largest_first_to_the_lightest_shard():
    assert deal({"a": 10, "b": 7, "c": 5, "d": 3, "e": 1}, 2) == [["a", "d"], ["b", "c", "e"]]
    assert deal({"a": 1}, 3) == [["a"], [], []]


def test_the_gpu_test_files_are_found():
    files = gpu_test_files()
    assert "tests/test_program_gpu.py" in files and files["tests/test_program_gpu.py"] >= 5
    assert "tests/test_capture.py" not in files  # CPU tests are not dealt
