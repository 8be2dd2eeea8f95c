"""``evo bench``: strategies side by side on the same kernels, the same GPU, one call.

For each kernel of the chosen suite, every strategy runs its own search with its OWN
empty measurement store (so no strategy profits from another's measurements) through
one shared backend (one GPU worker):

| strategy       | what it is                                                        |
| -------------- | ----------------------------------------------------------------- |
| sweep          | every single gene alone                                           |
| greedy         | sequential greedy, up to 6 steps                                  |
| evolve_matched | evolve with max_evals = what greedy used on that kernel           |
| evolve_ls      | evolve_matched with a local search of 2 neighbors of the best a gen |
| evolve_sweep   | evolve_ls starting from a sweep and stacks of its best genes      |
| evolve45       | evolve at 9 generations x pop 5 (45 trials, the EvoEngineer budget)|
| mcgs45         | Monte-Carlo graph search at the same 9 x 5 (``evo.strategies.mcgs``) |
| policy1        | one argmax rollout of a trained gene policy, at most 8 genomes (``--policy``) |
| policy45       | the policy's rollouts at 9 x 5 (``evo.strategies.policy``)         |
| evolve45_priors| evolve45 with priors from other kernels (``--priors``, see below)  |
| mcgs45_priors  | mcgs45 with the same priors (its expansion order and P-UCB's P)    |
| oracle         | every combination of one gene per group (only on ``oracle_kernels``)|
| any other      | a strategy of ``evo.strategies`` with no arm above, under its own options |

``--jobs N`` searches N kernels at once (each kernel's strategies in the order above):
their CPU work (apply, ptxas) overlaps, their measurements do not (one at a time per GPU).

Results go to ``OUT/results.json`` after every (kernel, strategy), so a bench split over
several calls (e.g. to fit a 10-minute limit) skips what is done, and so does
``OUT/bench.md`` (``evo.bench_report``): per kernel baseline, best and speedup per strategy, evaluations, wall
time; and per strategy mean / median / best cycle reduction, evolve vs greedy wins / ties
/ losses, evaluations per second (per strategy from its searches' own times, and overall
from the bench's wall time, ``wall_seconds``, summed over calls).

The strategies of ``WITH_PRIORS`` search with a prior (``evo.learn``) for each kernel, built
without that kernel's own results (leave-one-out; ``--priors loo``, from ``--priors-from``
stores or, by default, the bench's own stores of its other strategies: then they run once
every other strategy has finished every kernel), or from a priors file; bench.md says which.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from genomes.errors import EvoError
from genomes.genome import Genome

from evo import strategies as _registry  # "strategies" is run_bench's argument
from evo.config import Config
from evo.driver import MemoryLedger, each_kernel
from evo.kernel_run import KernelRun, Observer
from evo.rundir import write_atomic
from evo.search import new_checkpoint, search_kernel, valid_cycles

# The contestants, in the order they run: the strategies under bench settings, then every
# other strategy of evo.strategies under its own (a new strategy's file is enough).
_BENCHED = ("sweep", "greedy", "evolve_matched", "evolve_ls", "evolve_sweep", "evolve45",
            "mcgs45", "policy1", "policy45", "oracle", "evolve45_priors", "mcgs45_priors")
STRATEGIES = _BENCHED + tuple(n for n in _registry.NAMES
                              if n not in _BENCHED and f"{n}45" not in _BENCHED)
POLICY_ARMS = ("policy1", "policy45")  # their policy file per kernel: run_bench's policies
# searched after the others (they may learn from them), each as its arm without the suffix
WITH_PRIORS = ("evolve45_priors", "mcgs45_priors")
MATCHED = ("evolve_matched", "evolve_ls", "evolve_sweep")  # at greedy's evaluation count
SUITES = {
    "gemm64": "gemm_tile_[2468]x[2468]x[2468]",
    "gemm_large": "gemm_tile_1[0246]x*",
    "many": "!gemm_tile_*",  # the many-thread kernels at L2 sizes (not the *_dram ones)
    "dram": "*_dram",  # the memory-bound ones again at DRAM sizes
}
TIE = 0.005  # within 0.5 % counts as a tie: measurement noise, not a win


def suite_kernels(name: str) -> list[str]:
    """Kernel names of a bench suite (or a comma-separated list of kernel names)."""
    import fnmatch

    from harness.kernels.suite import list_kernels

    names = [k.name for k in list_kernels()]
    pattern = SUITES.get(name)
    if pattern is None:
        return [n.strip() for n in name.split(",") if n.strip()]
    if pattern.startswith("!"):
        return [n for n in names if not fnmatch.fnmatch(n, pattern[1:])
                and not fnmatch.fnmatch(n, SUITES["dram"])]
    return [n for n in names if fnmatch.fnmatch(n, pattern)]


def strategy_config(base: Config, strategy: str, greedy_evals: int | None) -> Config:
    if strategy in WITH_PRIORS:  # the same search; its prior comes with the call
        return strategy_config(base, strategy.removesuffix("_priors"), greedy_evals)
    if strategy in ("evolve45", "mcgs45", "policy45"):  # the README's 9 x 5 = 45 trials
        return base.override("run", strategy=strategy[:-2], generations=9, pop=5, max_evals=0)
    if strategy == "policy1":  # one argmax rollout: at most 8 genes after the baseline
        return base.override("run", strategy="policy", generations=9, pop=1, max_evals=0)
    if strategy in MATCHED:
        if greedy_evals is None:
            raise EvoError(f"{strategy} needs greedy's evaluations on the kernel: run greedy too")
        # As many generations as the budget allows; the budget is the binding limit.
        matched = base.override("run", strategy="evolve", generations=1000,
                                max_evals=max(1, greedy_evals))
        if strategy == "evolve_sweep":
            return matched.override("evolve", local_search=2, init="sweep")
        return matched.override("evolve", local_search=2) if strategy == "evolve_ls" else matched
    return base.override("run", strategy=strategy, max_evals=0)  # sweep, greedy, oracle, ...


def run_bench(kernels: list[str], strategies: list[str], base: Config, out: Path,
              backend_kind: str = "auto", progress=print, backend=None,
              oracle_kernels: set[str] | None = None, keep_stores: bool = False,
              jobs: int = 8, priors=None, policies=None) -> dict:
    """Run (or continue) the bench; return the results dict also saved in OUT.

    ``jobs`` kernels are searched at once, each by one thread running its strategies in
    order (evolve_matched needs greedy's count): with pop-5 batches the GPU would idle
    while ptxas works on the next one. The backend measures one candidate per GPU at a
    time whoever asks, so only CPU work (apply, ptxas) overlaps and timings are as with
    ``jobs=1``; every search seeds its own RNG per kernel, so results are the same too.

    ``backend`` (an object) replaces the one ``backend_kind`` would build (tests).
    ``keep_stores`` keeps each (kernel, strategy) store in OUT/stores/, so that engine
    changes can later be tried offline against them (``evo store merge``, then ``evo bench
    --backend replay --store MERGED``): a replayed bench counts, per search, the genomes the
    store could not answer (``misses``), and bench.md says it was replayed; the features of
    kernels outside the suite go beside them, so priors and policies can learn from them.

    ``priors`` (an ``evo.learn.source.BenchPriors``) gives the ``WITH_PRIORS`` strategies
    their priors; they run after the other strategies have finished every kernel.
    ``policies`` (an ``evo.learn.policy_train.BenchPolicies``) the ``POLICY_ARMS`` their
    policy file per kernel (default: the shipped policy)."""
    import contextlib
    import threading

    from harness.backends import make_backend
    from harness.kernels.spec import with_caches

    from evo.bench_report import render
    from harness.kernels.suite import find_kernel

    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {"kernels": {}}
    order = [s for s in STRATEGIES if s in strategies]
    needs_greedy = [s for s in MATCHED if s in order]
    if needs_greedy and "greedy" not in order:
        order.insert(order.index(needs_greedy[0]), "greedy")
    # an unknown name fails before any search
    specs = {k: with_caches(find_kernel(k), base.run.caches) for k in kernels}
    owned = backend is None
    backend = backend or make_backend(backend_kind, seed=base.run.seed,
                                      cluster=base.cluster.address,
                                      cluster_compile=base.cluster.compile,
                                      timing=base.to_dict()["timing"])
    lock, stop = threading.Lock(), threading.Event()
    wall_before, started = results.get("wall_seconds", 0.0), time.perf_counter()

    def finished(kernel: str, strategy: str, entry: dict) -> None:
        # One writer at a time: results.json is dumped whole, and never mid-change. bench.md
        # follows each search too, so a call cut off at its time limit leaves a table.
        with lock:
            results["kernels"].setdefault(kernel, {})[strategy] = entry
            results["wall_seconds"] = round(wall_before + time.perf_counter() - started, 2)
            write_atomic(path, json.dumps(results, indent=1, sort_keys=True))
            write_atomic(out / "bench.md", render(results, order, kernels))
            progress(f"{kernel} {strategy}: {entry['baseline']} -> {entry['best']} cycles, "
                     f"{entry['evals']} evals, {entry['seconds']:.1f} s")

    def run_kernel(kernel: str, names: list[str], source=None) -> None:
        with lock:  # a started kernel has an entry, as it always had
            done = dict(results["kernels"].setdefault(kernel, {}))  # this thread's own copy
        for strategy in names:
            if strategy in done or (strategy == "oracle" and kernel not in
                                    (oracle_kernels or set())):
                continue
            config = strategy_config(base, strategy, done.get("greedy", {}).get("evals"))
            if strategy in POLICY_ARMS and policies is not None:
                config = config.override("policy", file=policies.file_for(kernel, progress))
            prior = source.prior(specs[kernel], backend.device) if source else None
            done[strategy] = _search(kernel, specs[kernel], strategy, config, backend,
                                     stores, apply_pool, stop, prior)
            finished(kernel, strategy, done[strategy])

    with (backend if owned else contextlib.nullcontext()), \
            tempfile.TemporaryDirectory(prefix="evo-bench-") as tmp, _apply_pool() as apply_pool:
        stores = out / "stores" if keep_stores else Path(tmp)
        stores.mkdir(exist_ok=True)
        results["device"] = backend.device
        results["backend"] = backend.describe()
        if policies is not None and any(s in POLICY_ARMS for s in order):
            results["policies"] = policies.describe()
        if base.oracle.genomes:
            results["oracle_plan"] = base.oracle.genomes
        phases = ([s for s in order if s not in WITH_PRIORS],
                  [s for s in order if s in WITH_PRIORS])
        for names in filter(None, phases):
            source = None
            if names is phases[1]:  # the others are done: what to learn from is known
                source = priors.open(stores, results, phases[0], progress) if priors else None
                if source is None:
                    progress(f"{', '.join(names)}: waiting until the other strategies "
                             "have finished every kernel (run the same command again)")
                    break
                results["priors"] = source.describe()
            # evo run's driver: the first failure (or Ctrl-C) sets ``stop``, so running
            # searches stop at their next batch; what finished is saved
            each_kernel(kernels, lambda k, _slot, n=names, s=source: run_kernel(k, n, s),
                        max(1, jobs), stop)
        if keep_stores:
            _keep_features(stores, specs, kernels)
        if backend.remeasures:  # a GPU: what a user would run instead, timed the same way
            _time_peers(results, specs, getattr(backend, "gpus", [0])[0], progress)
            write_atomic(path, json.dumps(results, indent=1, sort_keys=True))
    write_atomic(out / "bench.md", render(results, order, kernels))
    return results


def _time_peers(results: dict, specs: dict, gpu: int, progress) -> None:
    """Each kernel's peer (``harness.kernels.peers``), once per bench folder: results["peers"]."""
    from harness.kernels.peers import peer_or_reason

    peers = results.setdefault("peers", {})
    for name, spec in specs.items():
        if spec.peer and name not in peers and name in results["kernels"]:
            peers[name] = peer_or_reason(spec, gpu)
            progress(f"{name}: peer {spec.peer}: "
                     f"{peers[name].get('peer_us') or peers[name].get('reason')}")


def _apply_pool():
    """One process pool applying genomes for all the searches, where an Evaluator would
    start its own (>= 8 cores): one each would be jobs x cores processes, and a spawn
    start (~1 s of imports) per search. Else nothing: Evaluators apply in their thread."""
    import concurrent.futures
    import contextlib
    import os

    cores = os.cpu_count() or 1
    if cores < 8:
        return contextlib.nullcontext()
    from harness.gpu import spawn

    return concurrent.futures.ProcessPoolExecutor(cores, mp_context=spawn.context())


class _Curve(Observer):
    """What bench keeps of a search's batches: the evaluations so far and the best valid
    cycles after each batch that improved it (a batch's gain is put at its end), and how
    many genomes a replay store could not answer (they count as invalid)."""

    def __init__(self):
        self.count, self.misses, self.points = 0, 0, []

    def evaluated(self, genomes, results, baseline) -> None:
        from harness import record

        # The search sends only genomes it has not evaluated: each one is an evaluation.
        self.misses += sum(m.reason == record.NOT_MEASURED for m in results)
        self.count += len(genomes)
        best = min((m.cycles for m in results if m.valid and m.cycles), default=None)
        if best is not None and (not self.points or best < self.points[-1][1]):
            self.points.append([self.count, best])

    def closed(self) -> list[list]:
        """The curve, ending at the final count."""
        if self.points and self.points[-1][0] != self.count:
            return self.points + [[self.count, self.points[-1][1]]]
        return self.points


def store_file(stores: Path, kernel: str, strategy: str) -> Path:
    """A (kernel, strategy) search's store: in ``stores`` itself whatever the kernel's name.
    A spec's path is flattened (``/`` -> ``_``): joined as it was, an absolute path put the
    store beside the user's spec, and a relative one in folders that the priors' search
    for the bench's own stores (``*.sqlite`` in ``stores``) never looked into."""
    flat = kernel.replace("\\", "/").strip("/").replace("/", "_")
    return stores / f"{flat}-{strategy}.sqlite"


def _keep_features(stores: Path, specs: dict, kernels: list[str]) -> None:
    """The features of the kernels outside the suite (a user's spec, stored as name#digest)
    in ``features.json`` beside the kept stores, as ``evo run`` keeps them beside its
    store: without them `evo priors build` and `evo train policy` leave those kernels out
    of what they learn from the bench's stores (suite kernels need none: evo finds their
    specs). ~1 s of ptxas a kernel, in threads, once."""
    from evo.learn.features import features_many
    from evo.learn.source import feature_cache_path, read_cache, write_cache

    outside = [k for k in kernels if specs[k].store_name != specs[k].name]
    if not outside:
        return
    path = feature_cache_path(store_file(stores, outside[0], "any"))  # every store's folder
    cache = read_cache(path)
    features_many([specs[k] for k in outside], cache)
    write_cache(path, cache)


def _search(kernel: str, spec, strategy: str, config: Config, backend, stores: Path,
            apply_pool, stop, prior: dict | None = None) -> dict:
    """One (kernel, strategy) search with its own empty store and Evaluator: its entry."""
    from harness.evaluate import Evaluator
    from harness.store import Store

    curve = _Curve()
    with Store(store_file(stores, kernel, strategy)) as store:
        evaluator = Evaluator(backend, store, apply_pool=apply_pool)
        measuring = KernelRun(spec, evaluator, stop, observers=[curve])
        start = time.perf_counter()
        try:
            res = search_kernel(measuring, MemoryLedger(new_checkpoint(config)), config,
                                prior=prior)
        finally:
            evaluator.close()
        seconds = time.perf_counter() - start
    entry = {"baseline": valid_cycles(res.baseline), "best": valid_cycles(res.best),
             "evals": res.evals, "seconds": round(seconds, 2),
             "genome": str(Genome.from_json(res.best_genome)),
             "timer": (res.best or {}).get("timer", ""),
             # what the backend had to measure: genomes minus those the search's own store
             # answered (same PTX as an earlier one, or different PTX, same machine code)
             "measured": evaluator.stats.measured,
             "curve": curve.closed()}
    for key, summary in (("baseline_us", res.baseline), ("best_us", res.best)):
        if summary and summary.get("valid") and summary.get("us_per_launch"):
            entry[key] = summary["us_per_launch"]  # events timer: the memory table's figures
            entry.update(bytes=summary["bytes_moved"], copy_gbps=summary.get("copy_gbps"),
                         caches=summary.get("caches"))
    if backend.name == "replay":
        entry["misses"] = curve.misses
    if prior is not None:
        entry["prior"] = {"neighbors": prior["neighbors"][:3], "seeds": prior["seeds"][:4]}
    return entry

