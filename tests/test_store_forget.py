"""The store keeps what was measured, not what broke around it: a ptxas that crashed is no
result of the variant (not stored: the next evaluation assembles it again), and `evo store
forget` deletes results by kernel, reason or genome, with the links that led to them."""

from __future__ import annotations

import stat

import pytest

from conftest import needs_ptxas
from evo.cli import main
from evo.learn.observe import link_results
from genomes.genome import Genome, parse_inline
from harness import toolchain
from harness.backends import make_backend
from harness.evaluate import Evaluator
from harness.store import STATIC_DEVICE, Store, StoreError
from harness.kernels.suite import find_kernel

pytestmark = needs_ptxas


@pytest.fixture
def crashing_ptxas(tmp_path, monkeypatch):
    """A function that points EVO_PTXAS at a ptxas that segfaults, or back at the real one."""
    real = toolchain.find_ptxas()
    broken = tmp_path / "bin" / "ptxas"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho 'Segmentation fault (core dumped)' >&2\nexit 139\n")
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("EVO_TOOL_CACHE", str(tmp_path / "cache"))

    def use(crash: bool):
        monkeypatch.setenv("EVO_PTXAS", str(broken if crash else real))
        toolchain.clear_cache()
    yield use
    toolchain.clear_cache()


def _evaluate(store, genomes):
    spec = find_kernel("relu")
    with make_backend("static", store=store) as backend:
        evaluator = Evaluator(backend, store)
        results = evaluator.evaluate(spec, genomes)
        link_results(evaluator, spec.store_name, genomes, results)
        evaluator.close()
    return results


def test_a_crashed_ptxas_is_not_stored_and_the_fixed_tool_measures(tmp_path, crashing_ptxas):
    genome = parse_inline("coarsen(k=4)")
    with Store(tmp_path / "s.sqlite") as store:
        crashing_ptxas(False)
        _evaluate(store, [Genome()])  # the baseline, with the real tool
        crashing_ptxas(True)
        (bad,) = _evaluate(store, [genome])
        assert not bad.valid and "status 139" in bad.reason
        assert store.lookup_ptx(STATIC_DEVICE, "relu", bad.ptx_hash) is None
        crashing_ptxas(False)
        (good,) = _evaluate(store, [genome])
        assert good.valid and not good.cached and good.cycles > 0


def test_forget_by_reason_kernel_and_genome(tmp_path, capsys):
    path = tmp_path / "s.sqlite"
    broken = parse_inline("coarsen(k=4)")
    with Store(path) as store:
        results = _evaluate(store, [Genome(), parse_inline("cache_ld(policy=cs)"), broken])
        assert all(m.valid for m in results)
        rows = store.summary()
        assert rows == [(STATIC_DEVICE, "relu", 3, 3)]
        with pytest.raises(StoreError, match="kernel, a reason or a genome"):
            store.forget()
        assert store.forget(reason="ptxas error")["measurements"] == 0
        gone = store.forget(genome="coarsen(form=contiguous,k=4)")
        assert gone == {"measurements": 1, "ptx_links": 1, "genome_links": 1}
        assert store.lookup_ptx(STATIC_DEVICE, "relu", results[2].ptx_hash) is None
        assert store.lookup_ptx(STATIC_DEVICE, "relu", results[1].ptx_hash) is not None
    # The CLI: by kernel, the rest; a filter outside forget, or none, is one error line.
    assert main(["store", "forget", str(path), "--kernel", "relu"]) == 0
    out = capsys.readouterr().out
    assert "forgot 2 results" in out and "kernel 'relu'" in out
    with Store(path) as store:
        assert store.summary() == []
    assert main(["store", "forget", str(path)]) == 2
    assert "kernel, a reason or a genome" in capsys.readouterr().err
    assert main(["store", "stats", str(path), "--kernel", "relu"]) == 2
    assert main(["store", "forget", str(tmp_path / "absent.sqlite"), "--kernel", "relu"]) == 2


def test_forget_by_kernel_name_takes_its_store_names_with_a_digest(tmp_path):
    """A captured or user's kernel is stored as ``name#digest`` (KernelSpec.store_name):
    the user names it without the digest; a longer name sharing the prefix is kept."""
    from harness.record import Measurement

    with Store(tmp_path / "s.sqlite") as store:
        for kernel in ("k", "k#0123456789ab", "k_2", "k_2#0123456789ab"):
            store.put("GPU", kernel, "ptx-" + kernel, "code-" + kernel,
                      Measurement(kernel, "GPU", True, cycles=1.0, timer="clock64", n=1))
        assert store.forget(kernel="k")["measurements"] == 2
        assert sorted(row[1] for row in store.summary()) == ["k_2", "k_2#0123456789ab"]
