"""evo.learn.priors and observe: gene effects from a store, the knowledge base file, and
a kernel's prior without its own rows (no leakage). A synthetic landscape in a real
SQLite store; features come from a prefilled cache, so no ptxas is needed."""

from __future__ import annotations

import json
import math

import pytest

from evo.learn import priors as P
from evo.learn.features import feature_key
from harness.record import Measurement
from harness.store import Store
from harness.kernels.suite import find_kernel

from conftest import needs_ptxas

KERNELS = ("gemm_tile_2x2x2", "gemm_tile_2x2x4", "gemm_tile_2x4x2", "gemm_tile_4x4x4")
# cycles multiply by these factors: effects add up in log space
FACTORS = {"vec_ld(width=4)": 0.7, "vec_st(width=4)": 0.9, "maxnreg(n=128)": 1.0,
           "maxnreg(n=32)": 2.0}
GENOMES = ["", "vec_ld(width=4)", "vec_st(width=4)", "maxnreg(n=128)", "maxnreg(n=32)",
           "cache_ld(policy=cv)", "vec_ld(width=4),vec_st(width=4)",
           "vec_ld(width=4),maxnreg(n=128)", "vec_ld(width=4),vec_st(width=4),maxnreg(n=128)"]


def cycles_of(text: str, base: float, extra: dict | None = None) -> float | None:
    if "cache_ld(policy=cv)" in text:
        return None  # invalid: a wrong answer
    factors = {**FACTORS, **(extra or {})}
    out = base
    for gene in filter(None, text.split(",")):
        out *= factors[gene]
    return out


def fill(store: Store, kernel: str, device: str = "NVIDIA H200", base: float = 1000.0,
         extra: dict | None = None, genomes=GENOMES) -> None:
    """One store row and genome link per genome (each its own PTX and code)."""
    pairs = []
    for i, text in enumerate(genomes):
        c = cycles_of(text, base, extra)
        m = Measurement(kernel, device, c is not None, "ok" if c else "wrong result",
                        cycles=c, timer="clock64", n=1, backend="gpu")
        store.put(device, kernel, f"ptx{i}-{text}", f"code{i}-{text}", m)
        pairs.append((text, f"ptx{i}-{text}"))
    store.link_genomes(device, kernel, pairs)


def feature_cache(scale: dict | None = None) -> dict:
    """Synthetic features: registers and instructions grow with the kernel's size."""
    cache = {}
    for n, name in enumerate(KERNELS):
        cache[feature_key(find_kernel(name))] = {"registers": 20.0 + 10 * n,
                                                 "ptx_instructions": 50.0 * (n + 1),
                                                 "frac_fma": 0.3}
    return cache


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "s.sqlite") as s:
        for k in KERNELS:
            fill(s, k)
        yield s


def test_genome_links_read_back_through_ptx_and_code(store):
    rows = [r for r in store.genome_results() if r[1] == KERNELS[0]]
    assert len(rows) == len(GENOMES)
    assert ("NVIDIA H200", KERNELS[0], "", 1, 1000.0) in rows
    assert ("NVIDIA H200", KERNELS[0], "cache_ld(policy=cv)", 0, None) in rows
    assert store.genome_results("static") == []


def test_summary_recovers_effects_interactions_and_best_genomes():
    results = [(t, cycles_of(t, 1000.0) is not None, cycles_of(t, 1000.0)) for t in GENOMES]
    s = P.summarize(1000.0, results)
    assert s["genes"]["vec_ld(width=4)"][0] == pytest.approx(math.log(1 / 0.7), abs=1e-4)
    assert s["genes"]["vec_st(width=4)"][0] == pytest.approx(math.log(1 / 0.9), abs=1e-4)
    assert s["genes"]["maxnreg(n=128)"][0] == pytest.approx(0.0, abs=1e-4)
    assert s["genes"]["cache_ld(policy=cv)"][0] == pytest.approx(-P.CLIP, abs=1e-4)  # 4x slower
    assert s["pairs"] == {}  # the effects add up: no interaction
    assert s["best"][0] == ["vec_ld(width=4),vec_st(width=4)", pytest.approx(math.log(1 / 0.63),
                                                                              abs=1e-4)]
    # vec_st is worth nothing once vec_ld is in: a negative 2x2 contrast
    bent = [(t, True, 1000 * 0.7 if t == "vec_ld(width=4),vec_st(width=4)" else c)
            for t, _, c in results if c]
    inter = P.summarize(1000.0, bent)["pairs"]["vec_ld(width=4)|vec_st(width=4)"]
    assert inter[0] == pytest.approx(-math.log(1 / 0.9), abs=1e-4) and inter[1] == 1


def test_rows_are_thinned_to_ROWS_unless_all_are_kept():
    results = [("", True, 1000.0)] + [(f"maxnreg(n={n})", True, 1000.0 - n) for n in range(16, 256)]
    assert len(P.summarize(1000.0, results)["rows"]) <= P.ROWS < len(results)
    assert len(P.summarize(1000.0, results, keep=0)["rows"]) == len(results)  # a policy's data


def test_register_budgets_are_counted_on_the_ladder():
    assert P.gene_key(__import__("genomes.genome").genome.Gene.make("maxnreg", n=134)) == \
        "maxnreg(n=128)"
    assert P.genome_keys("vec_ld(width=4),maxnreg(n=170)") == ["vec_ld(width=4)", "maxnreg(n=160)"]
    assert P.genome_keys("no_such_transform") is None


def test_knowledge_base_round_trips_through_its_file(store, tmp_path):
    kb = P.build_kb([store], feature_cache=feature_cache())
    assert [e["kernel"] for e in kb["kernels"]] == sorted(KERNELS)
    P.save_kb(kb, tmp_path / "priors.json")
    assert P.load_kb(tmp_path / "priors.json") == json.loads(json.dumps(kb))
    prior = P.prior_for(kb, KERNELS[0], "NVIDIA H200", kb["kernels"][0]["features"])
    assert json.loads(json.dumps(prior)) == prior  # plain JSON, as a checkpoint holds it


def test_a_kernels_own_rows_never_count_toward_its_prior(tmp_path):
    target = KERNELS[1]
    with Store(tmp_path / "a.sqlite") as a, Store(tmp_path / "b.sqlite") as b:
        for k in KERNELS:
            fill(a, k)
            # b: the same, but on the target itself a gene does wonders
            fill(b, k, extra={"maxnreg(n=128)": 0.1} if k == target else None)
        kb_a = P.build_kb([a], feature_cache=feature_cache())
        kb_b = P.build_kb([b], feature_cache=feature_cache())
    feats = next(e["features"] for e in kb_a["kernels"] if e["kernel"] == target)
    pa = P.prior_for(kb_a, target, "NVIDIA H200", feats)
    pb = P.prior_for(kb_b, target, "NVIDIA H200", feats)
    assert pa == pb
    assert target not in [n[0] for n in pa["neighbors"]] and target in pa["excluded"]
    assert pa["genes"]["maxnreg(n=128)"] == pytest.approx(0.0, abs=1e-4)
    # leaving the target out of the knowledge base changes nothing either
    without = {**kb_a, "kernels": [e for e in kb_a["kernels"] if e["kernel"] != target]}
    assert P.prior_for(without, target, "NVIDIA H200", feats) == pa
    # exclude=: more kernels left out (leave-one-family-out)
    fewer = P.prior_for(kb_a, target, "NVIDIA H200", feats, exclude=[KERNELS[0]])
    assert {n[0] for n in fewer["neighbors"]} == set(KERNELS) - {target, KERNELS[0]}


def test_expected_effects_and_seeds(store):
    kb = P.build_kb([store], feature_cache=feature_cache())
    feats = kb["kernels"][0]["features"]
    prior = P.prior_for(kb, KERNELS[0], "NVIDIA H200", feats)
    genes = prior["genes"]
    assert genes["vec_ld(width=4)"] > genes["vec_st(width=4)"] > 0 > genes["maxnreg(n=32)"]
    # shrunk toward 0 by the evidence: a weighted mean over 3 kernels, plus SHRINK
    assert genes["vec_ld(width=4)"] < math.log(1 / 0.7)
    assert prior["seeds"][0] == "vec_ld(width=4),vec_st(width=4)"  # the model's stack
    assert "vec_ld(width=4),vec_st(width=4)" in prior["seeds"]
    assert not any("maxnreg(n=32)" in s or "cv" in s for s in prior["seeds"])


def test_devices_weigh_in_by_kind(tmp_path):
    with Store(tmp_path / "s.sqlite") as s:
        fill(s, KERNELS[0], device="NVIDIA H100 80GB HBM3")
        fill(s, KERNELS[2], device="NVIDIA H200")
        kb = P.build_kb([s], feature_cache=feature_cache())
    feats = {"registers": 30.0, "ptx_instructions": 100.0, "frac_fma": 0.3}
    on_h200 = P.prior_for(kb, KERNELS[1], "NVIDIA H200", feats)
    weights = {n[0]: n[2] for n in on_h200["neighbors"]}
    assert 0 < weights[KERNELS[0]] <= P.OTHER_GPU + 1e-9 and weights[KERNELS[2]] > 0
    assert P.prior_for(kb, KERNELS[1], "static", feats)["neighbors"] == []  # never mixed
    assert P.device_weight("static", "NVIDIA H200") == 0.0


def test_bad_priors_files_are_one_line_errors(tmp_path):
    with pytest.raises(P.PriorsError, match="no such priors file"):
        P.load_kb(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(P.PriorsError, match="not a priors file"):
        P.load_kb(tmp_path / "bad.json")
    (tmp_path / "old.json").write_text('{"version": 99, "kernels": []}')
    with pytest.raises(P.PriorsError, match="evo priors build"):
        P.load_kb(tmp_path / "old.json")


def test_merging_stores_keeps_genome_links(tmp_path, store):
    with Store(tmp_path / "merged.sqlite") as merged:
        added = merged.merge_from(store.path)
        assert added["genomes"] == len(KERNELS) * len(GENOMES)
        assert merged.genome_results() == store.genome_results()


def test_gains_after_say_which_gene_followed_which_on_a_kernel():
    rows = [["", 0.0], ["vec_ld(width=4)", 0.1], ["cache_ld(policy=cs)", -0.05],
            ["cache_ld(policy=cs),vec_ld(width=4)", 0.4], ["fast_exp", 0.02]]
    gains = P._gains_after(rows)
    assert gains == pytest.approx({"vec_ld(width=4)>cache_ld(policy=cs)": 0.3,
                                   "cache_ld(policy=cs)>vec_ld(width=4)": 0.45})


def test_the_prior_eval_orders_next_genes_by_effect_and_by_gains_after(tmp_path, capsys):
    """Two kernels teach that cache_ld(cs) gains after vec_ld(4) though it loses alone;
    on the third, held out, that is the best next gene after vec_ld(4): ordered first by
    the gains after, not by the effects alone."""
    from evo.learn import prior_eval

    rows = [["", 0.0], ["vec_ld(width=4)", 0.1], ["cache_ld(policy=cs)", -0.05],
            ["fast_exp", 0.05], ["cache_ld(policy=cs),vec_ld(width=4)", 0.4],
            ["fast_exp,vec_ld(width=4)", 0.12]]
    kb = {"version": 1, "kernels": [
        {"kernel": f"k{i}", "device": "d", "features": {"frac_x": 0.5}, "baseline": 1000.0, "n": 6,
         "genes": {"vec_ld(width=4)": [0.1, 0.2, 3], "cache_ld(policy=cs)": [-0.05, 0.2, 2],
                   "fast_exp": [0.05, 0.1, 2]},
         "pairs": {}, "best": [], "rows": rows} for i in range(3)]}
    (tmp_path / "kb.json").write_text(json.dumps(kb))
    assert prior_eval.main([str(tmp_path / "kb.json"), "--device", "d", "--kernels", "k2"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("k2") and "after: first best 100.0 %, regret 0.0000" in line, line
    # the root's best next gene is vec_ld(4) either way; after it, alone picks fast_exp
    assert "alone: first best  50.0 %, regret 0.1400" in line, line


def test_rank_correlation_of_expected_and_measured_gains():
    from evo.learn.prior_eval import spearman

    assert spearman([0.1, 0.2, 0.3], [1.0, 2.0, 3.0]) == 1.0
    assert spearman([0.1, 0.2, 0.3], [3.0, 2.0, 1.0]) == -1.0


@needs_ptxas
def test_a_runs_kernels_features_are_computed_at_once_before_their_priors(monkeypatch, tmp_path):
    """PriorSource.warm: every kernel's features in one call (threads run their ptxas and
    cuobjdump side by side); each prior then finds them kept and computes none again."""
    from evo.learn import features, source
    from harness.store import Store

    computed = []
    real = features.kernel_features
    monkeypatch.setattr(features, "_SEEN", {})
    monkeypatch.setattr(features, "kernel_features", lambda spec: computed.append(spec.name) or real(spec))
    specs = [find_kernel(k) for k in ("gemm_tile_2x2x2", "relu", "softmax")]
    with Store(tmp_path / "s.sqlite") as store:
        src = source.open_source("auto", store, tmp_path / "s.sqlite")
        src.warm(specs)
        assert sorted(computed) == sorted(s.name for s in specs)
        priors = [src.prior(spec, "static") for spec in specs]
    assert len(computed) == 3 and all(p["kernel"] == s.name for p, s in zip(priors, specs))
    assert (tmp_path / "features.json").is_file()  # kept beside the store for the next run


@needs_ptxas
def test_a_runs_kernels_features_are_computed_while_its_backend_starts(monkeypatch, tmp_path):
    """The features (ptxas, cuobjdump) and the backend's start (GPU workers: processes
    of their own) take seconds each: a run begins both at once. One after another, the
    first would wait at the barrier alone and break it."""
    import threading

    import harness.backends as backends
    from evo import cli
    from evo.learn import source

    barrier = threading.Barrier(2, timeout=20)
    warm, make = source.PriorSource.warm, backends.make_backend

    def warm_at_the_barrier(self, specs):
        barrier.wait()
        return warm(self, specs)

    def make_at_the_barrier(*args, **kwargs):
        barrier.wait()
        return make(*args, **kwargs)

    monkeypatch.setattr(source.PriorSource, "warm", warm_at_the_barrier)
    monkeypatch.setattr(backends, "make_backend", make_at_the_barrier)
    assert cli.main(["run", "--kernel", "relu", "--backend", "static", "--priors", "auto",
                     "--generations", "1", "--pop", "2", "--out", str(tmp_path / "r"),
                     "--store", str(tmp_path / "s.sqlite"), "-q"]) == 0
    assert not barrier.broken
