"""The gene policy (issue 29): its landscapes and file (numpy, no PyTorch), training by
behaviour cloning and GRPO (PyTorch: skipped where it is not installed), and the
``policy`` strategy through ``evo run`` on the static backend."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import needs_ptxas

from evo.cli import main
from evo.learn.policy import (FAILED, STEP_COST, Landscape, Policy, PolicyError, child_state,
                              save)

A, B, C = "vec_ld(width=4)", "cache_ld(policy=cg)", "fast_exp"


def myopic(name: str = "k", feature: float = 0.5) -> Landscape:
    """A landscape where greedy stops too early: A alone is the best first step (+0.10) and
    nothing improves on it, while B (-0.05 alone) then C reaches +0.50."""
    values = {(A,): 0.10, (B,): -0.05, (C,): -0.02, tuple(sorted((A, B))): 0.08,
              tuple(sorted((A, C))): 0.09, tuple(sorted((B, C))): 0.50,
              tuple(sorted((A, B, C))): FAILED}
    return Landscape(name, {"frac_x": feature, "instructions": 100.0}, values)


def test_a_gene_replaces_the_gene_of_its_group_and_stacks_with_others():
    assert child_state((), A) == (A,)
    assert child_state(("maxnreg(n=64)", A), "maxnreg(n=128)") == tuple(sorted((A, "maxnreg(n=128)")))
    assert child_state((A,), "vec_ld(width=2)") == ("vec_ld(width=2)",)


def test_greedy_on_what_was_measured_takes_the_best_move_and_stops_where_nothing_gains():
    land = myopic()
    vocab = sorted([A, B, C])
    steps = land.greedy(vocab)
    assert [(s, a) for s, a, _ in steps] == [((), vocab.index(A)), ((A,), len(vocab))]
    assert set(steps[0][2]) == {0, 1, 2}  # every single was measured


def test_a_kb_entry_becomes_a_landscape_with_failures_as_failed():
    entry = {"kernel": "k", "device": "d", "features": {"frac_x": 1.0},
             "rows": [["", 0.0], [A, 0.2], [f"{A},{B}", -math.log(4.0)], ["not a gene", 1.0]]}
    land = Landscape.from_kb_entry(entry)
    assert land.values == {(): 0.0, (A,): 0.2, tuple(sorted((A, B))): FAILED}


def test_a_policy_file_that_cannot_be_used_says_why(tmp_path):
    with pytest.raises(PolicyError, match="no policy file"):
        Policy.load(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text('{"version": 99}')
    with pytest.raises(PolicyError, match="version"):
        Policy.load(tmp_path / "bad.json")


def _hand_made(path, vocab: list[str], favourite: str) -> None:
    """A one-layer policy whose logits prefer ``favourite`` at the baseline and STOP once
    the genome holds it (weights written by hand: no training)."""
    n = len(vocab)
    inputs = 1 + n + 1  # one feature, the genome's genes, its length
    w = [[0.0] * inputs for _ in range(n + 1)]
    b = [0.0] * n + [1.0]  # STOP: 1
    b[vocab.index(favourite)] = 5.0
    w[n][1 + vocab.index(favourite)] = 10.0  # holding the favourite: STOP wins
    save({"version": 1, "features": ["frac_x"], "mean": [0.0], "std": [1.0], "vocab": vocab,
          "layers": [{"w": w, "b": b}]}, path)


@needs_ptxas
def test_the_policy_strategy_follows_its_policy_and_resumes(tmp_path):
    vocab = sorted(["vec_st(width=4)", "vec_ld(width=4)", "reorder(strategy=critical_path)"])
    _hand_made(tmp_path / "p.json", vocab, "vec_st(width=4)")
    (tmp_path / "evo.toml").write_text(f'[policy]\nfile = "{tmp_path / "p.json"}"\n')

    def run(out, *extra, resume=False):
        where = ["--resume", str(tmp_path / out)] if resume else ["--out", str(tmp_path / out)]
        fresh = [] if resume else [
            "--config", str(tmp_path / "evo.toml"), "--kernel", "gemm_tile_4x4x4", "--backend",
            "static", "--strategy", "policy", "--store", str(tmp_path / f"{out}.sqlite")]
        assert main(["run", *fresh, "-q", *where, *extra]) == 0
        return json.loads((tmp_path / out / "checkpoint.json").read_text())["kernels"]["gemm_tile_4x4x4"]

    one = run("one", "--generations", "8", "--pop", "1")
    # one argmax rollout: the baseline, the favourite, then STOP
    assert sorted(one["known"]) == sorted(['{"genes": []}', json.dumps(
        {"genes": [{"params": {"width": 4}, "transform": "vec_st"}]}, sort_keys=True)])
    many = run("many", "--generations", "4", "--pop", "3", "--seed", "5")
    assert many["evals"] > 2  # the sampled rollouts measure what the argmax one does not
    part = run("part", "--generations", "2", "--pop", "3", "--seed", "5")
    assert part["evals"] < many["evals"]
    resumed = run("part", "--generations", "4", resume=True)
    assert resumed["known"] == many["known"] and resumed["state"] == many["state"]


# --------------------------------------------------------------------------- training


def test_cloning_copies_greedy_and_grpo_finds_the_path_greedy_misses():
    pytest.importorskip("torch")
    from evo.learn.policy_train import train

    lands = [myopic()]
    cloned = train(lands, iterations=0, clone_epochs=300, seed=1)
    assert cloned["trained"]["clone_agreement"] == 1.0
    greedy = 0.10 - STEP_COST
    assert cloned["trained"]["one_rollout_reward"]["cloned"] == pytest.approx(greedy)
    better = train(lands, iterations=300, group=16, clone_epochs=300, seed=1)
    reward = better["trained"]["one_rollout_reward"]
    assert reward["grpo"] == pytest.approx(0.50 - 2 * STEP_COST), reward  # B and C
    policy = Policy(better)  # the file's numpy network picks what the trained one did
    logits = policy.logits(policy.encode(lands[0].features, [()]))[0]
    assert policy.vocab[int(logits.argmax())] in (B, C)  # either order reaches {B, C}


def test_grpo_chooses_its_weights_on_kernels_it_did_not_train_on():
    """validation: two of six kernels are cloned from but left out of GRPO, and the weights
    kept are scored on them: the path greedy misses, found on the other four, is kept for
    what it gains on those two."""
    pytest.importorskip("torch")
    from evo.learn.policy_train import train

    lands = [myopic(f"k{i}", feature=0.1 * i) for i in range(6)]
    data = train(lands, iterations=200, group=16, clone_epochs=300, seed=1, validation=0.34)
    assert data["trained"]["scored_on"] == "2 held out"
    reward = data["trained"]["one_rollout_reward"]
    assert reward["cloned"] == pytest.approx(0.10 - STEP_COST)
    assert reward["grpo"] == pytest.approx(0.50 - 2 * STEP_COST), reward
    assert train(lands, iterations=0, clone_epochs=5, seed=1, validation=0)["trained"]["scored_on"] == "training"
    assert train(lands[:4], iterations=0, clone_epochs=5, seed=1)["trained"]["scored_on"] == "training"


def test_training_leaves_out_the_excluded_kernels(tmp_path):
    pytest.importorskip("torch")
    kb = {"version": 1, "kernels": [
        {"kernel": name, "device": "d", "features": {"frac_x": x},
         "rows": [["", 0.0], [A, 0.1], [C, 0.3 if name == "held_out" else -0.1]]}
        for name, x in (("seen", 0.1), ("held_out", 0.9))]}
    (tmp_path / "kb.json").write_text(json.dumps(kb))
    assert main(["train", "policy", str(tmp_path / "kb.json"), "-o", str(tmp_path / "p.json"),
                 "--exclude", "held_out", "--iterations", "5"]) == 0
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["trained"]["kernels"] == 1 and data["trained"]["exclude"] == ["held_out"]
    assert data["mean"] == [0.1]  # the held-out kernel's features are in no statistic


@needs_ptxas
def test_bench_runs_the_policy_arms_with_the_file_it_is_given(tmp_path):
    vocab = sorted(["vec_st(width=4)", "vec_ld(width=4)", "reorder(strategy=critical_path)"])
    _hand_made(tmp_path / "p.json", vocab, "vec_st(width=4)")
    assert main(["bench", "--suite", "gemm_tile_4x4x4", "--strategies", "policy1,policy45",
                 "--policy", str(tmp_path / "p.json"), "--backend", "static", "--out",
                 str(tmp_path / "b"), "-q"]) == 0
    results = json.loads((tmp_path / "b" / "results.json").read_text())
    arms = results["kernels"]["gemm_tile_4x4x4"]
    assert arms["policy1"]["evals"] == 2 and arms["policy1"]["genome"] == "vec_st(width=4)"
    assert 2 < arms["policy45"]["evals"] <= 45
    assert str(tmp_path / "p.json") in results["policies"]
    assert not (tmp_path / "b" / "policies").exists()  # a given file: nothing trained


def test_a_bench_trains_each_kernels_policy_without_it_once(tmp_path):
    pytest.importorskip("torch")
    from evo.learn.policy_train import BenchPolicies

    kb = {"version": 1, "kernels": [
        {"kernel": name, "device": "d", "features": {"frac_x": x},
         "rows": [["", 0.0], [A, 0.1], [C, -0.1]]} for name, x in (("k1", 0.1), ("k2", 0.9))]}
    (tmp_path / "kb.json").write_text(json.dumps(kb))
    policies = BenchPolicies("loo", tmp_path / "policies", [tmp_path / "kb.json"], iterations=3)
    policies.prepare(["k1", "k2"], log=lambda line: None, processes=2)
    for kernel, other in (("k1", 0.9), ("k2", 0.1)):
        data = json.loads(Path(policies.file_for(kernel)).read_text())
        assert data["trained"]["exclude"] == [kernel] and data["mean"] == [other]
    stamp = (tmp_path / "policies" / "k1.json").stat().st_mtime_ns
    policies.prepare(["k1"], log=lambda line: None)  # there already: not trained again
    assert (tmp_path / "policies" / "k1.json").stat().st_mtime_ns == stamp


def test_the_held_out_evaluation_prints_each_kernel_and_the_mean(tmp_path, capsys):
    pytest.importorskip("torch")
    from evo.learn import policy_eval

    kb = {"version": 1, "kernels": [
        {"kernel": name, "device": "d", "features": {"frac_x": x},
         "rows": [["", 0.0], [A, 0.1], [C, -0.1], [f"{A},{C}", 0.3]]}
        for name, x in (("k1", 0.1), ("k2", 0.9))]}
    (tmp_path / "kb.json").write_text(json.dumps(kb))
    assert policy_eval.main([str(tmp_path / "kb.json"), "--device", "d", "--iterations", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["k1", "k2", "mean"]
    assert f"greedy {0.3 - 2 * STEP_COST:+.4f}" in lines[0]  # A then C, as measured
