"""The cluster backend on a real Dask LocalCluster of worker processes, measuring with the
static backend (no GPU here): the same answers as without a cluster, and a worker killed
mid-batch loses nothing."""

from __future__ import annotations

import os

import pytest

from conftest import needs_ptxas
from genomes.genome import Genome, parse_inline
from harness.backends import make_backend
from harness.evaluate import Evaluator
from harness.store import Store
from harness.kernels.suite import find_kernel

pytest.importorskip("distributed")

GENOMES = ["vec_ld(width=4)", "maxnreg(n=32)", "reorder(strategy=interleave)",
           "vec_st(width=2)", "vec_ld(width=2),vec_st(width=2)", "cache_ld(policy=cs)",
           "maxnreg(n=64),vec_ld(width=4)", "reorder(strategy=loads_first)"]


def _answers(backend, spec) -> list[tuple]:
    with Store(":memory:") as store:
        found = Evaluator(backend, store).evaluate(
            spec, [Genome()] + [parse_inline(g) for g in GENOMES])
    return [(m.valid, m.cycles, m.registers, m.reason) for m in found]


@needs_ptxas
def test_a_local_cluster_answers_as_the_backend_alone():
    spec = find_kernel("gemm_tile_2x4x4")
    with make_backend("static") as alone:
        expected = _answers(alone, spec)
    with make_backend("static", cluster="local:2") as cluster:
        assert cluster.offers() == {"workers": 2, "slots": 2, "measure_slots": 2,
                                    "compile_slots": os.cpu_count() or 1}  # compiled here
        assert cluster.device == "static" and "2 Dask workers" in cluster.describe()
        assert _answers(cluster, spec) == expected


@needs_ptxas
def test_a_worker_killed_mid_run_loses_nothing():
    import os
    import signal

    spec = find_kernel("gemm_tile_4x4x4")
    first, second = GENOMES[:4], GENOMES[4:]
    with make_backend("static") as alone, Store(":memory:") as store:
        evaluator = Evaluator(alone, store)
        expected = [evaluator.evaluate(spec, [parse_inline(g) for g in batch])
                    for batch in (first, second)]
        measured = evaluator.stats.measured
    with make_backend("static", cluster="local:2") as cluster, Store(":memory:") as store:
        evaluator = Evaluator(cluster, store)
        got = [evaluator.evaluate(spec, [parse_inline(g) for g in first])]
        pids = cluster.client.run(os.getpid)
        os.kill(next(iter(pids.values())), signal.SIGKILL)  # its Nanny starts a new one
        got.append(evaluator.evaluate(spec, [parse_inline(g) for g in second]))
        assert cluster.lost_workers >= 1 and "lost" in cluster.describe()
        assert evaluator.stats.measured == measured  # nothing measured twice, nothing lost
    for want, have in zip(expected, got):
        assert [(m.valid, m.cycles, m.reason) for m in have] == \
            [(m.valid, m.cycles, m.reason) for m in want]


def test_a_bad_cluster_address_is_one_clear_error():
    from genomes.errors import EvoError

    with pytest.raises(EvoError, match="local:N"):
        make_backend("static", cluster="local:two")
    with pytest.raises(EvoError, match="measures with the gpu or static backend"):
        make_backend("replay", cluster="local:1")


@needs_ptxas
def test_evo_run_on_a_local_cluster_reports_what_it_reports_without(tmp_path):
    import json
    import subprocess
    import sys

    def run(name, *extra):
        subprocess.run([sys.executable, "-m", "evo.cli", "run", "--kernel", "gemm_tile_2x2x4",
                        "--backend", "static", "--generations", "2", "--pop", "4", "--seed",
                        "5", "--priors", "none", "--store", str(tmp_path / f"{name}.sqlite"),
                        "--out", str(tmp_path / name), "-q", *extra],
                       check=True, capture_output=True, text=True, timeout=600)
        checkpoint = json.loads((tmp_path / name / "checkpoint.json").read_text())
        results = (tmp_path / name / "report.md").read_text().split("Where the time went")[0]
        table = [ln for ln in results.splitlines() if ln.startswith("| ")]  # not wall seconds
        return checkpoint["kernels"], table, (tmp_path / name / "report.md").read_text()

    alone, alone_table, _ = run("alone")
    clustered, table, report = run("cluster", "--cluster", "local:2")
    assert clustered == alone and table == alone_table
    assert "2 Dask workers at local:2" in report
    # four workers, compiling on them too, as on a cluster of several hosts
    config = tmp_path / "four.toml"
    config.write_text('[cluster]\ncompile = "workers"\n')
    four, table, report = run("four", "--cluster", "local:4", "--config", str(config))
    assert four == alone and table == alone_table
    assert "4 Dask workers at local:4, compiling there" in report


@needs_ptxas
def test_bench_throughput_on_a_local_cluster_says_static_and_counts_workers(tmp_path, capsys):
    import json
    import re

    from harness.tools.bench_throughput import main

    out_file = tmp_path / "bench.json"
    assert main(["--seconds", "0.2", "--backend", "static", "--batch", "2", "--kernels",
                 "gemm_tile_2x2x2", "--cluster", "local:2", "--in-flight", "2",
                 "--out", str(out_file)]) == 0
    text = capsys.readouterr().out
    summary = json.loads(out_file.read_text())
    assert summary["static"] and summary["cluster"] == "local:2"
    assert summary["cluster_offers"]["workers"] == 2 and "2 workers" in text
    assert summary["in_flight"] == 2 and "2 measured at once" in text
    assert summary["pipeline"]["genomes"] == 2 * summary["batches"]  # every batch counted
    assert all("static estimate, not measured" in line for line in text.splitlines()
               if re.search(r"\d", line) and not line.startswith("wrote"))


def test_local_workers_spread_over_the_gpus():
    from harness.backends.cluster import gpu_of_worker

    assert [gpu_of_worker(i, 2) for i in range(4)] == [0, 1, 0, 1]
    assert gpu_of_worker("tcp://10.0.0.1:40000", 2) == 0  # started by hand: its own GPU 0
    assert gpu_of_worker(3, 1) == 0


def _start_a_child() -> int:
    """What the gpu backend does on a worker: measure in a child process of its own."""
    import multiprocessing

    child = multiprocessing.get_context("spawn").Process(target=int)
    child.start()
    child.join()
    return child.exitcode


def test_local_workers_may_start_child_processes():
    from harness.backends.cluster import _client_for

    client, cluster = _client_for("local:1")
    try:
        assert client.submit(_start_a_child, pure=False).result(timeout=120) == 0
    finally:
        client.close()
        cluster.close()


@needs_ptxas
def test_compiling_on_the_workers_answers_as_compiling_here():
    spec = find_kernel("gemm_tile_2x4x4")
    with make_backend("static") as alone:
        expected = _answers(alone, spec)
    with make_backend("static", cluster="local:2", cluster_compile="workers") as cluster:
        assert cluster.compile_on == "workers" and "compiling there" in cluster.describe()
        # two workers on this one host: each compiles on half its cores
        assert cluster.offers()["compile_slots"] == 2 * max(1, (os.cpu_count() or 1) // 2)
        assert _answers(cluster, spec) == expected
        # every PTX the evaluator compiled went to the workers (baseline and 8 genomes,
        # less those whose PTX is the baseline's or another's)
        assert cluster.compiled_on_workers >= 5
    with make_backend("static", cluster="local:2") as here:  # auto: a local cluster's
        assert here.compile_on == "driver"                   # workers share these cores
        assert _answers(here, spec) == expected and here.compiled_on_workers == 0


def test_a_bad_compile_place_is_one_clear_error():
    from genomes.errors import EvoError
    from harness.backends.cluster import ClusterBackend

    with pytest.raises(EvoError, match="compile = 'gpu'"):
        ClusterBackend("local:1", "static", compile_on="gpu")
