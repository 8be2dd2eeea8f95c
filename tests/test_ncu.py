"""The Nsight Compute pass (harness.gpu.ncu): its output read, its figures in the LLM's prompt.

CPU: ncu's raw CSV (as `ncu --csv --page raw --print-units base` writes it) parsed into
the figures, its failures into one reason, and `[llm] ncu_every` quoting them. GPU (with
ncu on the machine): a real pass over softmax.
"""

from __future__ import annotations

import pytest

import harness.gpu.ncu as ncu
import llm_server as fake
from conftest import needs_ptxas
from genomes.genome import Genome
from harness.kernels.suite import find_kernel

llm_server = fake.llm_server

RAW = '''==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "softmax" - 0: 0%....50%....100% - 9 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed","l1tex__t_sector_hit_rate.pct","lts__t_sector_hit_rate.pct","sm__throughput.avg.pct_of_peak_sustained_elapsed","sm__warps_active.avg.pct_of_peak_sustained_active","smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio","smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio","smsp__average_warps_issue_stalled_wait_per_issue_active.ratio","smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio"
"","","","","","","","","","","","%","%","%","%","%","ratio","ratio","ratio","ratio"
"0","4242","python3.12","127.0.0.1","softmax","1","7","(256, 1, 1)","(1024, 1, 1)","0","9.0","61.52","1.23","99.10","22.40","78.9","3.1","12.25","1,002.5","0"
==PROF== Disconnected from process 4242
'''


def test_raw_csv_gives_metrics_and_the_top_stalls():
    got = ncu.parse_raw_csv(RAW)
    assert got["metrics"] == {"memory throughput, % of peak": 61.52,
                              "compute (SM) throughput, % of peak": 22.4,
                              "achieved occupancy, %": 78.9, "L1 hit rate, %": 1.23,
                              "L2 hit rate, %": 99.1}
    assert got["stalls"] == [["wait", 1002.5], ["long_scoreboard", 12.25], ["barrier", 3.1]]


def test_failures_are_one_reason():
    denied = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access " \
             "NVIDIA GPU Performance Counters on the target device 0.\n"
    assert "ERR_NVGPUCTRPERM" in ncu.parse_raw_csv("", denied, 1)["error"]
    assert ncu.parse_raw_csv("", "", 3)["error"] == "ncu: no results (exit status 3)"
    header_only = RAW.split("\n")[2] + "\n"
    assert ncu.parse_raw_csv(header_only)["error"] == "ncu: no profiled launch in its output"


@needs_ptxas
def test_ncu_every_quotes_the_pass_in_the_prompt(llm_server, tmp_path, monkeypatch):
    from test_llm_mutation import GOOD, mutator

    monkeypatch.setattr(ncu, "find_ncu", lambda: None)  # as on a machine without ncu
    llm_server.script([fake.text(GOOD)] * 3)
    m = mutator(llm_server, tmp_path, monkeypatch, ncu_every=2)
    spec = find_kernel("gemm_tile_2x4x4")
    from evo.llm.mutation import SearchView

    for _ in range(3):
        m.propose(spec, Genome(), SearchView())
    prompts = [r.body["messages"][-1]["content"] for r in llm_server.requests]
    assert all("not available: ncu not found" in p for p in prompts)
    assert m.counts["ncu_passes"] == 2  # before calls 1 and 3
    state = m.stats()
    assert state["ncu_passes"] == 2 and "gemm_tile_2x4x4" in state["state"]["ncu"]


@pytest.mark.gpu
def test_a_real_ncu_pass_over_softmax():
    if ncu.find_ncu() is None:
        pytest.skip("no ncu on this GPU machine")
    spec = find_kernel("softmax")
    got = ncu.profile(spec, spec.ptx_text())
    assert "error" not in got, got
    assert 0 < got["metrics"]["memory throughput, % of peak"] <= 100
    assert got["stalls"] and all(v > 0 for _, v in got["stalls"])
    print(got)
