"""report.md's memory section: bytes moved, GB/s against the copy roofline, the caches and
the peer, from the figures the events timer leaves in a measurement's notes."""

from __future__ import annotations

from evo.report import memory_lines
from evo.search import KernelResult, summary
from harness.record import Measurement


def _measured(us: float, valid: bool = True) -> dict:
    m = Measurement(kernel="relu", device="H100", valid=valid, cycles=us * 1980,
                    timer="events", backend="gpu", reason="ok" if valid else "wrong result")
    m.notes = {"us_per_launch": us, "bytes_moved": 8_388_608, "copy_gbps": 3460.0,
               "caches": "warm (inputs reused across launches)", "graph_launches": 256}
    return summary(m)


def test_the_summary_keeps_what_the_memory_section_needs():
    s = _measured(3.32)
    assert {k: s[k] for k in ("us_per_launch", "bytes_moved", "copy_gbps", "caches")} == {
        "us_per_launch": 3.32, "bytes_moved": 8_388_608, "copy_gbps": 3460.0,
        "caches": "warm (inputs reused across launches)"}
    assert "graph_launches" not in s


def test_memory_lines_give_gbs_roofline_share_and_the_peer():
    result = KernelResult("relu", _measured(3.32), {"genes": []}, _measured(2.26), 45, 9)
    checkpoint = {"kernels": {"relu": {"peer": {"peer": "harness.kernels.peers:relu", "peer_us": 2.34,
                                                "peer_agrees": True}}}}
    head, line = memory_lines([result], checkpoint)
    assert "events timer" in head
    # 8388608 B / 3.32 µs = 2527 GB/s = 73 % of 3460; / 2.26 µs = 3712 GB/s = 107 %
    assert "8.4 MB moved" in line and "caches warm" in line
    assert "baseline 3.32 µs = 2527 GB/s (73 % of the copy)" in line
    assert "best 2.26 µs = 3712 GB/s (107 % of the copy)" in line
    assert "peer harness.kernels.peers:relu: 2.34 µs, best 1.04x the peer's speed" in line


def test_memory_lines_say_why_a_peer_was_not_timed_and_skip_clock64_kernels():
    relu = KernelResult("relu", _measured(3.32), {"genes": []}, _measured(2.0, valid=False), 5, 1)
    gemm = KernelResult("gemm_tile_2x2x2", {"valid": True, "cycles": 450.0, "timer": "clock64"},
                        {"genes": []}, None, 5, 1)
    checkpoint = {"kernels": {"relu": {"peer": {"peer": "harness.kernels.peers:relu",
                                                "reason": "torch is not installed here"}}}}
    _, line = memory_lines([relu, gemm], checkpoint)
    assert "best -" in line and "not timed: torch is not installed here" in line
    assert memory_lines([gemm], {}) == []
