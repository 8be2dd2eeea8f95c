"""Where a search's prior comes from: ``[run] priors`` (``evo run --priors``) and bench's
leave-one-out mode.

``none`` gives no prior (the search runs exactly as it always did). ``auto`` uses the
knowledge base shipped in the package (``SHIPPED``, where present) plus one built from the
run's own store, rebuilt at each kernel's start so later kernels learn from earlier ones.
Any other value is a path: a priors file (``evo priors build``) or a measurement store.

A kernel's prior (``evo.learn.priors.prior_for``) never counts the kernel's own rows, and
its seeds are applied to the kernel's PTX first: seeds that give the baseline's PTX, or
the PTX of an earlier seed, are dropped, so none of the budget goes to duplicates. The
prior is kept in the checkpoint (its ``priors`` section, ``evo.checkpoint``), so a resumed run uses the same
one, and an event ``{"type": "priors", ...}`` says what it was built from.

Features take ~1 s a kernel; they are cached in ``features.json`` beside the store.
"""

from __future__ import annotations

import json
from pathlib import Path

from evo.checkpoint import PRIORS, section
from evo.learn import priors as priors_mod

SHIPPED = Path(__file__).resolve().parent / "data" / "priors.json"
MAX_SEEDS = 12


def feature_cache_path(store_path: str | Path) -> Path | None:
    """Where the feature cache of a store lives: ``features.json`` in its folder (None for
    an in-memory store). Entries are keyed by content, so stores may share one."""
    if str(store_path) == ":memory:":
        return None
    return Path(store_path).parent / "features.json"


def read_cache(path: Path | None) -> dict:
    try:
        return json.loads(path.read_text()) if path else {}
    except (OSError, json.JSONDecodeError):
        return {}  # a cache: recomputed when unreadable


def write_cache(path: Path | None, cache: dict) -> None:
    if path is not None:
        from evo.rundir import write_atomic

        try:
            write_atomic(path, json.dumps(cache, sort_keys=True))
        except Exception:
            pass  # a cache that cannot be written costs time, not results


class PriorSource:
    """The knowledge base(s) one run draws its kernels' priors from."""

    def __init__(self, setting: str, fixed: dict | None, store=None, store_path=None,
                 sources: list[str] | None = None):
        self.setting = setting
        self.fixed = fixed  # a file's (or the shipped) knowledge base
        self.store = store  # a live store, read again for each kernel (auto)
        self.cache_path = feature_cache_path(store_path) if store_path else None
        self.cache = read_cache(self.cache_path)
        self.sources = sources or []

    def kb(self, exclude=()) -> dict:
        """The knowledge base as it stands now (the live store read again)."""
        if self.store is None:
            return self.fixed or {"kernels": []}
        # No probing here: it applies every gene to every kernel of the store, for each
        # kernel of the run; stores older than genome links go through `evo priors build`.
        live = priors_mod.build_kb([self.store], exclude=exclude, feature_cache=self.cache,
                                   probe=False)
        write_cache(self.cache_path, self.cache)
        return priors_mod.merge_kb(self.fixed, live)

    def warm(self, specs: list) -> None:
        """The features of every kernel about to get a prior, computed at once: each needs
        ptxas and cuobjdump (~0.7 s a kernel here), which threads run side by side, while
        one prior at a time ran them one kernel after another before any search began,
        the GPUs idle (a model's 18 kernels: 18 such waits in a row). ``prior`` then finds
        them kept."""
        from evo.learn.features import features_many

        if specs:
            features_many(specs, self.cache)
            write_cache(self.cache_path, self.cache)

    def prior(self, spec, device: str, exclude=()) -> dict:
        """This kernel's prior, its own rows and ``exclude`` left out."""
        skip = set(exclude) | {spec.name}
        prior = kernel_prior(self.kb(skip), spec, device, skip, self.cache)
        write_cache(self.cache_path, self.cache)
        prior["setting"], prior["sources"] = self.setting, list(self.sources)
        return prior


def open_source(setting: str, store=None, store_path: str | Path | None = None
                ) -> PriorSource | None:
    """The source named by ``[run] priors`` (see the module docstring); ``store`` is the
    run's open store (auto reads it), ``store_path`` its path."""
    if setting == "none":
        return None
    if setting == "auto":
        fixed = priors_mod.load_kb(SHIPPED) if SHIPPED.is_file() else None
        sources = ([str(SHIPPED)] if fixed else []) + [f"store {store_path}"]
        return PriorSource(setting, fixed, store, store_path, sources)
    path = Path(setting)
    if not path.is_file():
        raise priors_mod.PriorsError(f"no such priors file or store: {setting} "
                                     "(--priors takes auto, none or a path)")
    return PriorSource(setting, kb_from_paths([path]),
                       sources=[f"store {path}" if is_store(path) else str(path)])


def is_store(path: Path) -> bool:
    """Whether ``path`` is an SQLite file (a measurement store) rather than a priors file."""
    with open(path, "rb") as f:
        return f.read(16).startswith(b"SQLite format 3")


def kb_from_paths(paths: list[Path], exclude=(), device: str | None = None,
                  rows: int = priors_mod.ROWS, left_out: list | None = None) -> dict:
    """One knowledge base from stores (learned from together: several stores of one
    kernel pool their results) and priors files (later ones win per kernel), without the
    kernels in ``exclude`` and, where ``device`` is given, other devices; ``rows`` results
    kept per kernel from stores (0: all); the stores' kernels outside the suite are named
    in ``left_out`` where given."""
    paths = [Path(p) for p in paths]
    for path in paths:
        if not path.is_file():
            raise priors_mod.PriorsError(f"no such store or priors file: {path}")
    stores = [p for p in paths if is_store(p)]
    parts = [priors_mod.load_kb(p) for p in paths if p not in stores]
    if stores:
        cache_path = feature_cache_path(stores[0])
        cache = read_cache(cache_path)
        parts.append(priors_mod.build_kb(stores, exclude, feature_cache=cache, keep=rows,
                                         left_out=left_out))
        write_cache(cache_path, cache)
    kb = priors_mod.merge_kb(*parts)
    kb["kernels"] = [e for e in kb["kernels"] if not priors_mod.same_kernel(e["kernel"], exclude)
                     and (device is None or e["device"] == device)]
    return kb


def add_held_out_arguments(parser) -> None:
    """The command line of an offline held-out evaluation (``policy_eval``, ``prior_eval``):
    its sources, the held-out kernels' device, and which of them."""
    parser.add_argument("sources", type=Path, nargs="+", help="stores or priors files")
    parser.add_argument("--device", required=True, help="the held-out kernels' device")
    parser.add_argument("--kernels", default="", help="comma-separated (default: all)")


def held_out_entries(args) -> tuple[dict, list[dict]]:
    """The knowledge base of ``args.sources`` (every result kept) and its entries of
    ``args.device`` named in ``args.kernels`` (all where none is named), in its order."""
    kb = kb_from_paths(args.sources, rows=0)
    wanted = {k for k in args.kernels.split(",") if k}
    return kb, [e for e in kb["kernels"]
                if e["device"] == args.device and (not wanted or e["kernel"] in wanted)]


def kernel_prior(kb: dict, spec, device: str, exclude=(), cache: dict | None = None) -> dict:
    """``prior_for`` one kernel spec, with its seeds checked against its PTX (see the
    module docstring) and at most ``MAX_SEEDS`` of them kept."""
    from evo.learn.features import features_many

    features = features_many([spec], cache)[spec.name]
    prior = priors_mod.prior_for(kb, spec.name, device, features, exclude,
                                 registers=features.get("registers"))
    prior["seeds"] = distinct_seeds(spec, prior["seeds"])[:MAX_SEEDS]
    return prior


def distinct_seeds(spec, seeds: list[str]) -> list[str]:
    """The seeds whose PTX on ``spec`` differs from the baseline's and from every earlier
    seed's (a gene that does not apply to this kernel changes nothing)."""
    from genomes import ptx
    from genomes.genome import apply_genome, parse_inline
    from harness.compile import ptx_hash

    text = spec.ptx_text()
    module = ptx.parse_shared(text, str(spec.ptx_path))  # apply_genome copies it
    seen = {ptx_hash(text)}
    out = []
    for seed in seeds:
        try:
            h = ptx_hash(apply_genome(module, parse_inline(seed)).ptx)
        except Exception:
            continue  # a seed that cannot even be applied is no seed
        if h not in seen:
            seen.add(h)
            out.append(seed)
    return out


def run_prior(source: PriorSource | None, checkpoint: dict, spec, device: str,
              on_events=None) -> dict | None:
    """The prior of one kernel of a run: the checkpoint's (a resumed run keeps the one it
    started with), else a new one from ``source``, kept in the checkpoint and announced
    with a ``priors`` event."""
    saved = checkpoint.get(PRIORS, {}).get(spec.name)
    if saved is not None or source is None:
        return saved
    prior = source.prior(spec, device)
    section(checkpoint, PRIORS)[spec.name] = prior
    if on_events:
        on_events([{"type": "priors", "kernel": spec.name, "setting": prior["setting"],
                    "sources": prior["sources"], "neighbors": prior["neighbors"][:4],
                    "seeds": prior["seeds"][:8]}])
    return prior


def report_lines(checkpoint: dict) -> list[str]:
    """What report.md says about the priors a run used (nothing when it used none)."""
    saved = checkpoint.get(PRIORS) or {}
    if not saved:
        return []
    first = next(iter(saved.values()))
    lines = [f"Priors: `{first['setting']}` ({', '.join(first['sources']) or 'no source'}); "
             "a kernel's own measurements never count toward its prior."]
    for kernel, p in saved.items():
        near = ", ".join(f"{k} ({w:.2f})" for k, _d, w in p["neighbors"][:3]) or "none"
        lines.append(f"- {kernel}: nearest {near}; {len(p['seeds'])} seeds, first "
                     f"`{p['seeds'][0] if p['seeds'] else '-'}`")
    return lines


class BenchPriors:
    """The priors of ``evo bench``'s strategies with priors (``--priors loo|FILE``).

    ``loo``: one knowledge base from the ``from_stores`` (or, when none are named, the
    bench's own stores of its strategies without priors, once each of them has finished
    every kernel of ``kernels``); each kernel's prior leaves that kernel out. A file: the
    same file for every kernel (still without the kernel's own entry)."""

    def __init__(self, setting: str, kernels: list[str], from_stores: list[Path] | None = None,
                 oracle_kernels=()):
        self.setting, self.kernels = setting, list(kernels)
        self.from_stores = list(from_stores or [])
        self.oracle_kernels = set(oracle_kernels)

    def own_stores(self) -> bool:
        return self.setting == "loo" and not self.from_stores

    def ready(self, results: dict, strategies: list[str]) -> bool:
        """Whether every kernel has every strategy of ``strategies`` done (own stores)."""
        if not self.own_stores():
            return True
        return all(s in results["kernels"].get(k, {})
                   or (s == "oracle" and k not in self.oracle_kernels)
                   for k in self.kernels for s in strategies)

    def open(self, stores_dir: Path, results: dict, strategies: list[str], progress=print):
        """The source the kernels' priors come from, or None while not ready; the bench's
        own stores are those of ``strategies`` (its strategies without priors)."""
        if self.setting != "loo":
            return _Described(open_source(self.setting))
        if not self.ready(results, strategies):
            return None
        paths = self.from_stores or sorted(
            p for p in Path(stores_dir).glob("*.sqlite")
            if p.stem.endswith(tuple(f"-{s}" for s in strategies)))
        if not paths:
            raise priors_mod.PriorsError(
                f"no stores to learn from in {stores_dir} (the other strategies' stores are "
                "kept there from the call that runs them): name some with --priors-from")
        progress(f"priors: learning from {len(paths)} stores (each kernel's own left out)")
        kb = kb_from_paths(paths)
        where = ", ".join(map(str, self.from_stores)) if self.from_stores else \
            "this bench's stores of its other strategies"
        source = PriorSource("loo", kb, sources=[where])
        return _Described(source, f"leave-one-out, learned from {where} ({len(paths)} stores, "
                                  f"{len(kb['kernels'])} kernels), the kernel under test left out")


class _Described:
    """A PriorSource with the line bench.md prints about it."""

    def __init__(self, source: PriorSource, line: str | None = None):
        self.source = source
        self.line = line or f"from {', '.join(source.sources)}, the kernel under test left out"

    def prior(self, spec, device: str) -> dict:
        return self.source.prior(spec, device)

    def describe(self) -> str:
        return self.line
