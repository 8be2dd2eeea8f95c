"""Priors: what genes did on other kernels, turned into expectations for a new one.

Two levels, both plain JSON.

**A knowledge base** (:func:`build_kb`; ``evo priors build`` writes one) has one entry per
(device, kernel) that a store holds results for: the kernel's features
(``evo.learn.features``), its baseline cycles, and :func:`summarize` of its results:

- each result becomes y = ln(baseline / cycles), clipped to +-ln 4; an invalid result
  (wrong answer, crash, ptxas error) counts as ln(1/4), four times slower;
- per gene (register budgets snapped to maxnreg's ladder, ``Param.snap``, genomes read as sets of
  genes): its main effect, the mean change of y when the gene is added to a genome that
  was measured without it too (greedy's steps, a sweep, a mutation's insert or delete
  make such pairs), or where there is no such pair the ridge regression coefficient of y
  on which genes a genome holds (lambda 0.5, no intercept: the baseline is y = 0); the
  mean y of the genomes that hold it, and their count;
- per pair of genes (a, b): their interaction, the mean 2x2 contrast
  y(S) - y(S - a) - y(S - b) + y(S - a - b) over the genomes S holding both for which all
  four were measured (0 where the two effects add up; the ``MAX_PAIRS`` largest by
  |interaction| x sqrt(contrasts));
- the ``TOP`` best valid genomes that beat the baseline, with their y;
- up to ``ROWS`` of its (genome, y) results, for the cost model (``evo.learn.cost``).

**A prior** for one target kernel (:func:`prior_for`) combines the entries of OTHER
kernels (the target's own name and those in ``exclude`` never count: leave-one-out):

- kernel weight w = device weight (same device 1, another GPU ``OTHER_GPU``, static
  estimates and GPUs never mix: 0) x exp(-(d / h)^2), d the feature distance to the
  target, h the distance of the ``NEIGHBORS``-th nearest kernel;
- a gene's expected effect: sum(w x effect) / (sum of w where it was seen + ``SHRINK``),
  a weighted mean pulled toward 0 where evidence is thin; a pair's interaction likewise;
- ``after``, gene -> next-gene gains (MCGS's ReGraph): "a>b" is the mean gain in y of adding
  b to a measured genome holding a, from each kernel's rows, weighted and shrunk as the
  effects are, kept where the kernels behind it weigh ``MIN_AFTER_EVIDENCE`` or more;
- seeds for a first generation (:func:`_seeds`), model-based and neighbor-based in turn;
- the results of the ``ROW_KERNELS`` nearest kernels, each with its kernel's weight.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

from genomes.errors import EvoError

KB_VERSION = 1
PRIOR_VERSION = 1
CLIP = math.log(4.0)
RIDGE = 0.5
MAX_PAIRS = 40
TOP = 5
OTHER_GPU = 0.3
NEIGHBORS = 4
SHRINK = 0.25
ROWS = 200
ROW_KERNELS = 3
MIN_AFTER_EVIDENCE = 1.0  # kernel weight behind an "a>b" gain for the prior to keep it
MIN_EFFECT = 0.005  # expected log-speedup below this (0.5 %) is no reason to seed a gene
STACK = 6  # genes in the predicted-best stack at most (weak effects would pile up)


class PriorsError(EvoError):
    """A priors file that cannot be used (missing, not JSON, another version)."""


def gene_key(gene) -> str:
    """The name a gene is counted under: its text, with each integer parameter snapped to
    the nearest value of its ladder (``Param.snap``: register budgets 8 apart do much the
    same)."""
    from genomes import transforms
    from genomes.genome import Gene

    if not isinstance(gene, Gene) or not gene.params:
        return str(gene)
    t = transforms.get(gene.transform)
    params = {name: t.param(name).snap(value) for name, value in gene.params}
    return str(gene) if params == dict(gene.params) else str(Gene.make(gene.transform, **params))


def genome_keys(text: str) -> list[str] | None:
    """The gene keys of an inline genome text (None when it no longer parses)."""
    keys = _genome_keys(text)
    return None if keys is None else list(keys)


@functools.lru_cache(maxsize=1 << 16)
def _genome_keys(text: str) -> tuple[str, ...] | None:
    """``genome_keys``, kept: each kernel's prior reads every neighbour's rows again
    (``_gains_after``); parsing them took 7.4 s of 18 s of a fake-GPU run's main process
    (the committed decoder capture, 5 kernels, under cProfile; BENCHMARKS.md, session 20)."""
    from genomes.genome import parse_inline

    try:
        return tuple(gene_key(g) for g in parse_inline(text).effective().genes)
    except EvoError:
        return None


def summarize(baseline: float, results: list[tuple[str, bool, float | None]],
              keep: int = ROWS) -> dict:
    """One kernel's results as gene effects, pair interactions and best genomes (see the
    module docstring). ``results`` are (genome text, valid, cycles); ``keep`` of them are
    kept as rows (0: all, as a policy's training wants every step greedy took)."""
    import numpy as np

    rows = []  # (gene keys, y, text, valid)
    for text, valid, cycles in results:
        keys = genome_keys(text)
        if keys is None:
            continue
        ok = valid and cycles is not None and cycles > 0
        y = max(-CLIP, min(CLIP, math.log(baseline / cycles))) if ok else -CLIP
        rows.append((frozenset(keys), y, text, ok))
    by_set: dict[frozenset, list[float]] = {}
    for keys, y, *_ in rows:
        by_set.setdefault(keys, []).append(y)
    mean_y = {keys: sum(ys) / len(ys) for keys, ys in by_set.items()}
    # What adding gene g did, wherever the genome without g was measured too; and for a
    # pair a < b, the 2x2 contrast y(S) - y(S-a) - y(S-b) + y(S-a-b) wherever all four
    # genomes were measured (0 when the two effects add up).
    diffs: dict[str, list[float]] = {}
    squares: dict[tuple[str, str], list[float]] = {}
    for keys, y in mean_y.items():
        for g in keys:
            parent = keys - {g}
            if parent in mean_y:
                diffs.setdefault(g, []).append(y - mean_y[parent])
                for h in parent:
                    if g < h and parent - {h} in mean_y and keys - {h} in mean_y:
                        squares.setdefault((g, h), []).append(
                            y - mean_y[parent] - mean_y[keys - {h}] + mean_y[parent - {h}])
    names = sorted({k for keys, *_ in rows for k in keys})
    genes = {}
    if names:
        index = {k: i for i, k in enumerate(names)}
        x = np.zeros((len(rows), len(names)))
        for r, (keys, *_) in enumerate(rows):
            x[r, [index[k] for k in keys]] = 1.0
        y = np.array([row[1] for row in rows])
        beta = np.linalg.solve(x.T @ x + RIDGE * np.eye(len(names)), x.T @ y)
        for k, i in index.items():
            held = x[:, i] > 0
            effect = sum(diffs[k]) / len(diffs[k]) if k in diffs else float(beta[i])
            genes[k] = [round(effect, 5), round(float(y[held].mean()), 5), int(held.sum())]
    pairs = []
    for (a, b), contrasts in squares.items():
        inter, n = sum(contrasts) / len(contrasts), len(contrasts)
        if abs(inter) > 1e-6:
            pairs.append((abs(inter) * math.sqrt(n), f"{a}|{b}", round(inter, 5), n))
    pairs.sort(key=lambda p: (-p[0], p[1]))
    # One genome per figure, the shortest: the same figure is almost surely the same code.
    best: list[tuple[float, str]] = []
    ranked = sorted(((-y_val, len(keys), text) for keys, y_val, text, ok in rows
                     if ok and y_val > 0 and keys))
    for neg, _n, text in ranked:
        if len(best) < TOP and all(-neg != y_val for y_val, _ in best):
            best.append((-neg, text))
    every = sorted((text, round(y_val, 5)) for _, y_val, text, _ in rows)
    step = max(1, math.ceil(len(every) / keep)) if keep else 1  # evenly spaced if more
    return {"baseline": baseline, "n": len(rows), "genes": genes,
            "pairs": {p[1]: [p[2], p[3]] for p in pairs[:MAX_PAIRS]},
            "best": [[text, round(y_val, 5)] for y_val, text in best],
            "rows": [list(r) for r in every[::step]]}


def build_kb(stores: list, exclude=(), feature_cache: dict | None = None, keep: int = ROWS,
             probe: bool = True, left_out: list | None = None) -> dict:
    """A knowledge base from measurement stores (``Store`` objects or paths): one entry
    per (device, kernel) with a valid baseline whose features are known: from its spec
    for a suite kernel, else from ``feature_cache`` under its store name (``named_key``:
    kept there by a run that evolved it); the names of the others go to ``left_out``
    where given. Kernels named in ``exclude`` are left out (``same_kernel``); ``keep``
    results a kernel as rows (``summarize``)."""
    from harness.store import Store
    from harness.kernels.suite import find_kernel

    from evo.learn.features import FEATURES_VERSION, features_many, named_key
    from evo.learn.observe import observations

    found: dict[tuple[str, str], dict] = {}
    for source in stores:
        store = source if isinstance(source, Store) else Store(source)
        try:
            for key, entry in observations(store, probe=probe).items():
                have = found.setdefault(key, {"baseline": None, "results": {}})
                have["baseline"] = have["baseline"] or entry["baseline"]
                for text, valid, cycles in entry["results"]:
                    have["results"].setdefault(text, (text, valid, cycles))
        finally:
            if store is not source:
                store.close()
    specs, cached = {}, {}
    for (device, kernel), entry in found.items():
        if (same_kernel(kernel, exclude) or not entry["baseline"] or kernel in specs
                or kernel in cached):
            continue
        try:
            specs[kernel] = find_kernel(kernel)
        except EvoError:  # not in the suite: its features where a run kept them
            feats = (feature_cache or {}).get(named_key(kernel))
            if feats is not None:
                cached[kernel] = feats
            elif left_out is not None and kernel not in left_out:
                left_out.append(kernel)
    feats = {**features_many(list(specs.values()), feature_cache), **cached}
    kernels = []
    for (device, kernel), entry in sorted(found.items()):
        if kernel in feats and entry["baseline"]:
            kernels.append({"device": device, "kernel": kernel, "features": feats[kernel],
                            **summarize(entry["baseline"], list(entry["results"].values()),
                                        keep)})
    return {"version": KB_VERSION, "features_version": FEATURES_VERSION, "kernels": kernels}


def same_kernel(stored: str, names) -> bool:
    """Whether a store's kernel name is one of ``names``, its ``#digest`` aside: a kernel
    outside the suite is stored as ``name#digest`` (``KernelSpec.store_name``), and its
    rows from any spec of that name (another size, an earlier capture) stay out of its
    own prior (leave-one-out)."""
    return stored in names or stored.split("#", 1)[0] in names


def merge_kb(*kbs: dict | None) -> dict:
    """One knowledge base from several; a later one's entry replaces an earlier one's for
    the same (device, kernel)."""
    entries: dict[tuple[str, str], dict] = {}
    for kb in kbs:
        for e in (kb or {}).get("kernels", []):
            entries[(e["device"], e["kernel"])] = e
    return {"version": KB_VERSION, "kernels": [entries[k] for k in sorted(entries)]}


def save_kb(kb: dict, path: str | Path) -> None:
    from evo.rundir import write_atomic

    write_atomic(Path(path), json.dumps(kb, indent=1, sort_keys=True))


def load_kb(path: str | Path) -> dict:
    """A knowledge base written by :func:`save_kb`; a bad file is one ``PriorsError``."""
    try:
        kb = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise PriorsError(f"no such priors file: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PriorsError(f"{path}: not a priors file ({err})") from None
    if not isinstance(kb, dict) or kb.get("version") != KB_VERSION or "kernels" not in kb:
        raise PriorsError(f"{path}: not a priors file of version {KB_VERSION} "
                          "(build one with `evo priors build STORE -o FILE`)")
    return kb


def device_weight(source: str, target: str) -> float:
    """How much another device's results count: the same 1, another GPU ``OTHER_GPU``,
    static estimates and GPU measurements never inform each other."""
    from harness.store import STATIC_DEVICE

    if source == target:
        return 1.0
    return 0.0 if STATIC_DEVICE in (source, target) else OTHER_GPU


def prior_for(kb: dict, target: str, device: str, features: dict[str, float],
              exclude=(), registers: float | None = None) -> dict:
    """The prior for kernel ``target`` on ``device`` (see the module docstring): plain
    JSON with the neighbors used, gene effects and evidence, pair interactions, seeds."""
    from evo.learn.features import distance, feature_scales

    skip = set(exclude) | {target}
    entries = [e for e in kb.get("kernels", [])
               if not same_kernel(e["kernel"], skip) and device_weight(e["device"], device) > 0]
    scales = feature_scales([e["features"] for e in entries] + [features])
    dists = [distance(features, e["features"], scales) for e in entries]
    ranked = sorted(dists)
    h = max(ranked[min(NEIGHBORS, len(ranked)) - 1], 1e-6) if ranked else 1.0
    weights = [device_weight(e["device"], device) * math.exp(-(d / h) ** 2)
               for e, d in zip(entries, dists)]
    genes: dict[str, list[float]] = {}
    pairs: dict[str, list[float]] = {}
    for e, w in zip(entries, weights):
        for k, (effect, _mean, _n) in e["genes"].items():
            acc = genes.setdefault(k, [0.0, 0.0])
            acc[0] += w * effect
            acc[1] += w
        for k, (inter, _n) in e["pairs"].items():
            acc = pairs.setdefault(k, [0.0, 0.0])
            acc[0] += w * inter
            acc[1] += w
    after: dict[str, list[float]] = {}
    for e, w in zip(entries, weights):
        for k, gain in _kept_gains_after(e.get("rows", [])).items():
            acc = after.setdefault(k, [0.0, 0.0])
            acc[0] += w * gain
            acc[1] += w
    effects = {k: round(s / (ev + SHRINK), 5) for k, (s, ev) in sorted(genes.items())}
    order = sorted(range(len(entries)), key=lambda i: (-weights[i], entries[i]["kernel"]))
    neighbors = [[entries[i]["kernel"], entries[i]["device"], round(weights[i], 4)]
                 for i in order]
    prior = {"version": PRIOR_VERSION, "kernel": target, "device": device,
             "excluded": sorted(skip), "neighbors": neighbors[:8], "genes": effects,
             "evidence": {k: round(ev, 4) for k, (_, ev) in sorted(genes.items())},
             "pairs": {k: round(s / (ev + SHRINK), 5) for k, (s, ev) in sorted(pairs.items())
                       if abs(s) > 1e-9}}
    prior["after"] = {k: round(s / (ev + SHRINK), 5) for k, (s, ev) in sorted(after.items())
                      if ev >= MIN_AFTER_EVIDENCE}
    nearest = [(entries[i], weights[i]) for i in order if weights[i] > 1e-3]
    prior["seeds"] = _seeds(prior, nearest, registers)
    prior["rows"] = [[text, y, round(w, 4)] for entry, w in nearest[:ROW_KERNELS]
                     for text, y in entry.get("rows", [])]
    return prior


def expected_gain(prior: dict, key: str, held=()) -> float:
    """What ``prior`` expects adding gene ``key`` to a genome holding the genes ``held``
    (prior keys) to gain: the mean of its ``after`` gains from genes held, where there are
    any, else its effect alone (0 where it knows nothing of it)."""
    after = prior.get("after", {})
    seen = [after[f"{a}>{key}"] for a in held if f"{a}>{key}" in after]
    return sum(seen) / len(seen) if seen else prior.get("genes", {}).get(key, 0.0)


_AFTER: dict[int, tuple[list, dict]] = {}  # id(rows) -> (rows, their _gains_after)


def _kept_gains_after(rows: list) -> dict[str, float]:
    """``_gains_after(rows)``, computed once per rows list: a run's priors (one a kernel)
    all read the same entries of one knowledge base, and each entry's gains took 15 % of
    a prior (resnet50's 18, BENCHMARKS.md session 21). Kept with the list itself, so an id
    reused by another list is never taken for it."""
    kept = _AFTER.get(id(rows))
    if kept is None or kept[0] is not rows:
        if len(_AFTER) > 4096:
            _AFTER.clear()
        kept = _AFTER[id(rows)] = (rows, _gains_after(rows))
    return kept[1]


def _gains_after(rows: list) -> dict[str, float]:
    """``"a>b"`` -> the mean gain in y of adding gene b to a measured genome that holds a
    (both genomes among ``rows``, one kernel's (genome text, y) results): which gene
    followed which well on that kernel."""
    y_of = {}
    for text, y, *_ in rows:
        keys = genome_keys(text)
        if keys is not None:
            y_of[frozenset(keys)] = y
    gains: dict[str, list[float]] = {}
    for held, y in y_of.items():
        for b in held:
            parent = held - {b}
            if parent in y_of:
                for a in parent:
                    gains.setdefault(f"{a}>{b}", []).append(y - y_of[parent])
    return {k: sum(v) / len(v) for k, v in gains.items()}


def _stack(prior: dict) -> list[str]:
    """Up to ``STACK`` genes with a positive expected effect, best first, at most one per
    conflict group; a gene is skipped when its interactions with those taken cancel it."""
    from genomes.genome import parse_inline

    taken: list[str] = []
    groups: set[str] = set()
    for key, effect in sorted(prior["genes"].items(), key=lambda kv: (-kv[1], kv[0])):
        if effect < MIN_EFFECT or len(taken) == STACK:
            break
        try:
            gene = parse_inline(key).genes[0]
        except EvoError:
            continue  # a transform this evo no longer has
        group = gene.group or gene.transform
        inter = sum(prior["pairs"].get("|".join(sorted((key, t))), 0.0) for t in taken)
        if group in groups or effect + inter <= 0:
            continue
        taken.append(key)
        groups.add(group)
    return taken


def _seeds(prior: dict, nearest: list[tuple[dict, float]], registers: float | None,
           limit: int = 16) -> list[str]:
    """Genome texts to try first: the model's list (the full stack, its shorter prefixes,
    the best single genes) and the neighbors' list (each near kernel's best genomes, the
    heaviest kernel first, register budgets rescaled) taken in turn, duplicates dropped."""
    stack = _stack(prior)
    model = iter([",".join(stack[:k]) for k in range(len(stack), 0, -1)] + stack[1:])
    # The neighbours' genomes are adapted as they are taken: a prior keeps ``limit`` of
    # them, of up to TOP x every kernel of the knowledge base.
    near = (_adapt(entry["best"][rank][0], entry["features"], registers)
            for rank in range(TOP) for entry, _w in nearest if rank < len(entry["best"]))
    out: list[str] = []
    while len(out) < limit:
        pair = (next(model, None), next(near, None))
        if pair == (None, None):
            break
        out += [text for text in dict.fromkeys(pair) if text and text not in out]
    return out[:limit]


def _adapt(text: str, source_features: dict, registers: float | None) -> str:
    """A neighbor's genome for this kernel: a register budget scaled by the ratio of the
    two kernels' baseline registers (rounded to 8, within 16..255)."""
    from genomes.genome import Gene, Genome, parse_inline

    theirs = source_features.get("registers")
    if not registers or not theirs:
        return text
    genes = []
    try:
        parsed = parse_inline(text).genes
    except EvoError:
        return text  # no longer readable: distinct_seeds drops what does not apply
    for g in parsed:
        if g.transform == "maxnreg":
            n = round(dict(g.params)["n"] * registers / theirs / 8) * 8
            g = Gene.make("maxnreg", n=max(16, min(255, n)))
        genes.append(g)
    return str(Genome(tuple(genes)))
