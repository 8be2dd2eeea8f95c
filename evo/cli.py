"""The ``evo`` command line.

Each subcommand is a small function ``cmd_<name>(args) -> int``; ``main`` maps bad input
(an ``EvoError``) to one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from genomes.errors import EvoError

DESCRIPTION = """\
evo evolves NVIDIA GPU kernels at the PTX level: genomes of PTX transforms (and LLM
patches) are applied to a kernel, assembled with ptxas, checked against the unmodified
kernel on the GPU, and timed; the fastest correct variants survive.

KERNEL arguments name a kernel of the built-in suite (see `evo kernels`) or a path to
a kernel spec (.toml) or a PTX file. GENOME is a JSON file, a JSON string, or an inline
list such as 'vec_ld,vec_st,maxnreg(n=128)' (see `evo transforms`).
"""


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except EvoError as err:
        print(f"evo: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("evo: interrupted", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evo", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    p = sub.add_parser("transforms", help="list the transform library")
    p.set_defaults(func=cmd_transforms)

    p = sub.add_parser("kernels", help="list the built-in kernel suite")
    p.set_defaults(func=cmd_kernels)

    p = sub.add_parser("init-kernel", help="write a spec skeleton (TOML) for a PTX kernel")
    p.add_argument("ptx", type=Path, metavar="PTX")
    p.add_argument("--entry", help="the .entry to describe (needed when the PTX has several)")
    p.add_argument("-o", "--output", type=Path,
                   help="where to write it (default: beside the PTX, same name, .toml)")
    p.set_defaults(func=cmd_init_kernel)

    p = sub.add_parser("apply", help="apply a genome to a kernel's PTX and print the result")
    p.add_argument("genome", metavar="GENOME")
    p.add_argument("kernel", metavar="KERNEL")
    p.add_argument("-o", "--output", type=Path, help="write the PTX here instead of stdout")
    p.set_defaults(func=cmd_apply)

    p = sub.add_parser("compile", help="assemble a kernel (optionally with a genome) with "
                                       "ptxas and print its resource report")
    p.add_argument("kernel", metavar="KERNEL")
    p.add_argument("--genome", metavar="GENOME", help="apply this genome first")
    p.add_argument("--arch", default="sm_90", help="target architecture (default sm_90)")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("measure", help="check and time a kernel (optionally with a genome) "
                                       "and its baseline, through the measurement store")
    p.add_argument("kernel", metavar="KERNEL")
    p.add_argument("--genome", metavar="GENOME", help="apply this genome first")
    p.add_argument("--backend", default="auto", choices=("auto", "gpu", "replay", "static"),
                   help="gpu: measure; replay: answer from the store only; static: no GPU, a "
                        "ptxas/SASS cost estimate; auto (default): gpu if CuPy sees one, else static")
    p.add_argument("--store", type=Path, metavar="PATH",
                   help="measurement store (default $EVO_STORE or runs/store.sqlite)")
    p.add_argument("--gpu", type=int, default=0, metavar="ID", help="CUDA device id (default 0)")
    p.add_argument("--device", metavar="NAME", help="replay: the device whose measurements to use "
                                                    "(default: the store's only GPU device)")
    p.add_argument("--seed", type=int, default=0, help="seed for the check and timing inputs")
    p.set_defaults(func=cmd_measure)

    p = sub.add_parser("run", help="evolve the kernels of the suite (the main job)",
                       description="Search for faster variants of every kernel in the config's "
                       "suite (or --kernel), measuring each candidate; writes runs/<name>/.")
    p.add_argument("--config", type=Path, default=None,
                   help="config file (default ./evo.toml if present, else built-in defaults)")
    p.add_argument("--kernel", action="append", metavar="KERNEL",
                   help="evolve this kernel instead of the suite (repeatable; globs allowed)")
    p.add_argument("--strategy", choices=("evolve", "greedy", "sweep", "oracle"),
                   help="evolve (default), greedy, sweep (each gene alone), oracle (every "
                        "combination of one gene per group: ~57k genomes a kernel)")
    p.add_argument("--generations", type=int, help="generations per kernel (evolve)")
    p.add_argument("--pop", type=int, help="population size (evolve)")
    p.add_argument("--max-evals", type=int, help="evaluations per kernel (0 = no cap)")
    p.add_argument("--seed", type=int, help="every random choice flows from this seed")
    p.add_argument("--llm-rate", type=float, metavar="P",
                   help="probability that a child is mutated by the LLM ([llm] in evo.toml "
                        "says which endpoint and model; default 0: no LLM)")
    p.add_argument("--backend", choices=("auto", "gpu", "replay", "static"))
    p.add_argument("--gpus", type=_gpu_ids, metavar="IDS",
                   help="comma-separated GPU ids, one worker each (e.g. 0,1)")
    p.add_argument("--store", help="measurement store (SQLite), shared across runs")
    p.add_argument("--out", type=Path, help="run folder (default runs/<timestamp>)")
    p.add_argument("--resume", type=Path, metavar="RUN",
                   help="continue RUN from its last checkpoint (a larger --generations extends it)")
    p.add_argument("--from-previous", action="store_true",
                   help="with --resume: use the previous checkpoint (if the last is damaged)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.add_argument("-v", "--verbose", action="store_true", help="a line per generation")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("bench", help="strategies side by side on the same kernels and GPU; "
                                     "writes OUT/results.json and OUT/bench.md")
    p.add_argument("--suite", default="gemm64",
                   help="gemm64 (the 64 {2,4,6,8}^3 tiles), gemm_large, many (the many-thread "
                        "kernels), or comma-separated kernel names")
    p.add_argument("--strategies", default="sweep,greedy,evolve_matched,evolve45",
                   help="comma-separated: sweep, greedy, evolve_matched (greedy's budget), "
                        "evolve_ls (the same with a local search on the best), evolve_sweep "
                        "(evolve_ls starting from a sweep of single genes), evolve45 "
                        "(9 generations x pop 5), oracle (exhaustive, only on the "
                        "--oracle-kernels)")
    p.add_argument("--oracle-kernels", default=",".join(("gemm_tile_4x4x4", "gemm_tile_4x6x8",
                                                          "gemm_tile_6x6x6", "gemm_tile_8x8x8")),
                   help="the kernels the oracle runs on (comma-separated)")
    p.add_argument("--backend", default="auto", choices=("auto", "gpu", "replay", "static"),
                   help="gpu: measure; replay: answer from --store only (engine changes "
                        "tried offline on kept, merged stores); static: no GPU, estimates")
    p.add_argument("--store", type=Path, metavar="PATH",
                   help="replay: the measurement store to answer from (see evo store merge)")
    p.add_argument("--device", metavar="NAME",
                   help="replay: the device whose measurements to use (default: the only one)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep-stores", action="store_true",
                   help="keep every strategy's measurement store in OUT/stores/ (for replay)")
    p.add_argument("--limit", type=int, default=0,
                   help="stop after this many kernels this call (0 = all); run again to go on")
    p.add_argument("--jobs", type=int, default=8, metavar="N",
                   help="kernels searched at once; measurements still one at a time per GPU "
                        "(default 8)")
    p.add_argument("--out", type=Path, required=True, help="bench folder (results.json is "
                   "read back, so a second call continues where the first stopped)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("store", help="inspect or merge measurement stores (for replay)")
    p.add_argument("action", choices=("stats", "merge"),
                   help="stats: rows per device and kernel; merge: copy SRC stores into PATH")
    p.add_argument("path", type=Path, metavar="PATH")
    p.add_argument("sources", type=Path, nargs="*", metavar="SRC")
    p.set_defaults(func=cmd_store)

    p = sub.add_parser("show", help="table of a run's kernels: baseline, best, speedup, genome")
    p.add_argument("run", type=Path, metavar="RUN")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("plot", help="write fitness curves (plots/<kernel>.png) and a speedup "
                                    "summary (plots/summary.png) for one or more runs; for an "
                                    "evo bench folder, best-so-far curves per strategy and "
                                    "plots/reduction.png")
    p.add_argument("runs", type=Path, nargs="+", metavar="RUN")
    p.add_argument("--kernels", help="bench folders: comma-separated kernels to draw "
                                     "(default: the first 4)")
    p.set_defaults(func=cmd_plot)
    return parser


# --------------------------------------------------------------------------- commands


def cmd_transforms(args) -> int:
    from genomes import transforms

    rows = [(t.name, t.group or "-", " ".join(p.describe() for p in t.params) or "-",
             t.summary) for t in transforms.registry().values()]
    _print_table(("transform", "group", "params", "what it does"), rows)
    aliases = ", ".join(f"{a}={t}({','.join(f'{k}={v}' for k, v in p.items())})"
                        for a, (t, p) in sorted(transforms.ALIASES.items()))
    print(f"\naliases: {aliases}")
    return 0


def cmd_kernels(args) -> int:
    from harness.suite import list_kernels

    rows = [(k.name, "x".join(map(str, k.grid)), "x".join(map(str, k.block)), k.timing,
             k.description) for k in list_kernels()]
    _print_table(("kernel", "grid", "block", "timer", "description"), rows)
    return 0


def cmd_init_kernel(args) -> int:
    from harness.spec_ptx import spec_skeleton

    if not args.ptx.is_file():
        raise EvoError(f"no such PTX file: {args.ptx}")
    out = args.output or args.ptx.with_suffix(".toml")
    if out.exists():
        raise EvoError(f"{out} exists; remove it or pass -o")
    out.write_text(spec_skeleton(args.ptx.read_text(), args.entry, args.ptx.name))
    print(f"wrote {out}: fill in every TODO (buffer counts and roles, scalar values, "
          f"grid and block), then `evo measure {out}`")
    return 0


def cmd_apply(args) -> int:
    from genomes.genome import apply_genome, load_genome

    genome = load_genome(args.genome)
    ptx_text, source = kernel_ptx(args.kernel)
    applied = apply_genome(_parse(ptx_text, source), genome)
    for outcome in applied.outcomes:
        extra = f" ({outcome.changes} changes)" if outcome.changes else ""
        detail = f": {outcome.detail}" if outcome.detail else ""
        print(f"{outcome.gene}: {outcome.status}{extra}{detail}", file=sys.stderr)
    if args.output:
        args.output.write_text(applied.ptx)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(applied.ptx)
    return 0


def cmd_compile(args) -> int:
    from harness.compile import compile_ptx

    ptx_text, source = kernel_ptx(args.kernel)
    if args.genome:
        from genomes.genome import apply_genome, load_genome

        ptx_text = apply_genome(_parse(ptx_text, source), load_genome(args.genome)).ptx
    result = compile_ptx(ptx_text, args.arch)
    if not result.ok:
        print(f"ptxas failed: {result.error}")
        return 1
    print(f"kernel:        {source}")
    print(f"arch:          {result.arch}")
    print(f"registers:     {result.registers}")
    print(f"spill stores:  {result.spill_stores} B")
    print(f"spill loads:   {result.spill_loads} B")
    print(f"stack frame:   {result.stack_frame} B")
    print(f"shared memory: {result.shared_mem} B")
    print(f"cubin:         {len(result.cubin)} B, ptxas {result.seconds * 1000:.0f} ms")
    return 0


def cmd_measure(args) -> int:
    """Measure one variant and the baseline; static numbers are labelled on every line."""
    import os

    from genomes.genome import Genome, load_genome
    from harness.backends import make_backend
    from harness.evaluate import Evaluator
    from harness.store import Store
    from harness.suite import find_kernel

    spec = find_kernel(args.kernel)
    genome = load_genome(args.genome) if args.genome else Genome()
    store_path = args.store or Path(os.environ.get("EVO_STORE") or "runs/store.sqlite")
    if args.backend == "replay" and not store_path.is_file():
        raise EvoError(f"no measurement store at {store_path} to replay from (--store or $EVO_STORE)")
    with Store(store_path) as store, make_backend(args.backend, store=store, gpus=[args.gpu],
                                                  device=args.device, seed=args.seed) as backend:
        evaluator = Evaluator(backend, store)
        base = evaluator.baseline(spec)
        m = evaluator.evaluate(spec, [genome])[0]
    static = m.is_static or backend.name == "static" or (backend.device == "static")
    tag = "static estimate, not measured"

    def say(line: str) -> None:
        # Every line carrying a number says it is an estimate when it is one.
        if static and any(ch.isdigit() for ch in line) and tag not in line:
            line = f"{line}  [{tag}]"
        print(line)

    say(f"kernel:     {spec.name}")
    say(f"genome:     {genome}")
    for gene in m.notes.get("genes", []):
        extra = f" ({gene['changes']} changes)" if gene["changes"] else ""
        say(f"  {gene['gene']}: {gene['status']}{extra}")
    say(f"backend:    {backend.describe()}")
    say(f"device:     {m.device or backend.device}")
    say(f"timer:      {m.timer or '-'}")
    if m.valid and m.cycles is not None:
        spread = (f"p10-p90 {m.p10:.0f}-{m.p90:.0f}" if m.p10 is not None and m.p90 is not None
                  else "p10-p90 n/a")
        say(f"cycles:     {m.label()}, {spread}, n={m.n}")
    say(f"registers:  {m.registers if m.registers is not None else '-'}")
    say(f"spills:     {m.spill_stores or 0} B stored, {m.spill_loads or 0} B loaded")
    say(f"valid:      {'yes' if m.valid else 'no'} ({m.reason})")
    for flag in m.flags:
        say(f"flag:       {flag}")
    say(f"baseline:   {base.label()}")
    if m.valid and base.valid and m.cycles and base.cycles:
        say(f"speedup:    {base.cycles / m.cycles:.2f}x vs baseline")
    say(f"store:      {store_path} ({'cached' if m.cached else 'new'})")
    return 0 if m.valid else 1


def cmd_run(args) -> int:
    from evo import config as config_mod
    from evo import run

    flags = {"generations": args.generations, "pop": args.pop, "max_evals": args.max_evals,
             "seed": args.seed, "backend": args.backend, "gpus": args.gpus,
             "store": args.store, "strategy": args.strategy, "suite": args.kernel}
    verbosity = 0 if args.quiet else (2 if args.verbose else 1)
    if args.resume:
        budget = {k: v for k, v in flags.items() if k in ("generations", "max_evals")}
        changed = [k for k, v in {**flags, "llm_rate": args.llm_rate}.items()
                   if v is not None and k not in budget]
        if changed:
            raise EvoError(f"--resume keeps the run's config; only --generations and "
                           f"--max-evals may be given (got --{changed[0].replace('_', '-')})")
        rundir, config, checkpoint = run.resume_run(args.resume, budget, args.from_previous)
    else:
        path = args.config or (Path("evo.toml") if Path("evo.toml").is_file() else None)
        config = config_mod.load(path).override("run", **flags)
        if args.llm_rate is not None:
            config = config.override("llm", rate=args.llm_rate)
        rundir, checkpoint = run.start_run(config, args.out), None
        from evo.search import new_checkpoint

        checkpoint = new_checkpoint(config)
    try:
        results = run.execute(rundir, config, checkpoint, verbosity)
    except KeyboardInterrupt:
        return 130
    if verbosity:
        from evo.report import render_table

        print(render_table(results))
        print(f"\nrun folder: {rundir.path} (evo show / evo plot {rundir.path})")
    return 0


def cmd_bench(args) -> int:
    import json

    from evo import bench
    from evo import config as config_mod

    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in strategies if s not in bench.STRATEGIES]
    if unknown:
        raise EvoError(f"unknown bench strategy {unknown[0]!r}; one of "
                       f"{', '.join(bench.STRATEGIES)}")
    if args.jobs < 1:
        raise EvoError(f"--jobs must be at least 1, got {args.jobs}")
    kernels = bench.suite_kernels(args.suite)
    if not kernels:
        raise EvoError(f"bench suite {args.suite!r} names no kernel")
    from harness.suite import find_kernel

    for k in kernels:
        find_kernel(k)  # an unknown name fails here, before any measuring
    done = args.out / "results.json"
    finished = set(json.loads(done.read_text())["kernels"]) if done.exists() else set()
    todo = [k for k in kernels if k not in finished] + [k for k in kernels if k in finished]
    if args.limit:
        todo = todo[:args.limit]
    base = config_mod.Config().override("run", seed=args.seed)
    oracle = {k.strip() for k in args.oracle_kernels.split(",") if k.strip()}
    with contextlib.ExitStack() as stack:
        backend = None
        if args.backend == "replay":
            from harness.backends.replay import ReplayBackend
            from harness.store import Store

            if args.store is None or not args.store.is_file():
                raise EvoError(f"evo bench --backend replay needs --store PATH, an existing "
                               f"measurement store (got {args.store})")
            backend = ReplayBackend(stack.enter_context(Store(args.store)), args.device)
        results = bench.run_bench(todo, strategies, base, args.out, args.backend,
                                  progress=lambda line: print(line, file=sys.stderr),
                                  oracle_kernels=oracle, keep_stores=args.keep_stores,
                                  jobs=args.jobs, backend=backend)
    print((args.out / "bench.md").read_text())
    left = [k for k in kernels if k not in results["kernels"]]
    if left:
        print(f"{len(left)} kernels left: run the same command again to continue")
    return 0


def cmd_store(args) -> int:
    from harness.store import Store

    if args.action == "stats" and not args.path.is_file():
        raise EvoError(f"no such measurement store: {args.path}")
    if args.action == "merge" and not args.sources:
        raise EvoError("evo store merge PATH SRC...: name at least one store to merge in")
    with Store(args.path) as store:
        for src in args.sources if args.action == "merge" else ():
            added = store.merge_from(src)
            print(f"{src}: {added['measurements']} measurements, {added['ptx_index']} PTX links added")
        rows = store.summary()
    _print_table(("device", "kernel", "measurements", "valid"), rows)
    return 0


def cmd_show(args) -> int:
    import tomllib

    from evo.report import llm_lines, render_table, results_from_checkpoint
    from evo.rundir import RunDir

    rundir = RunDir.open(args.run)
    strategy = tomllib.loads(rundir.config_text())["run"]["strategy"]
    print(render_table(results_from_checkpoint(rundir, strategy)))
    for line in llm_lines(rundir.read_checkpoint().get("llm")):
        print(line)
    return 0


def cmd_plot(args) -> int:
    from evo.plots import plot_bench, plot_runs

    benches = [p for p in args.runs if (p / "results.json").is_file()]
    runs = [p for p in args.runs if p not in benches]
    kernels = [k.strip() for k in args.kernels.split(",")] if args.kernels else None
    written = [path for b in benches for path in plot_bench(b, kernels)]
    written += plot_runs(runs) if runs else []
    for path in written:
        print(f"wrote {path}")
    return 0


# --------------------------------------------------------------------------- helpers


def kernel_ptx(arg: str) -> tuple[str, str]:
    """The PTX text of KERNEL (a suite name, a .toml spec or a .ptx path) and its source."""
    path = Path(arg)
    if path.suffix == ".ptx":
        if not path.is_file():
            raise EvoError(f"no such PTX file: {arg}")
        return path.read_text(), str(path)
    from harness.suite import find_kernel

    spec = find_kernel(arg)
    return spec.ptx_text(), str(spec.ptx_path)


def _parse(text: str, source: str):
    from genomes import ptx

    return ptx.parse(text, source)


def _gpu_ids(text: str) -> list[int]:
    """``0,1`` -> [0, 1] (argparse turns the error into one usage line)."""
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"GPU ids are comma-separated integers, got {text!r}")
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"GPU ids are integers >= 0, got {text!r}")
    return ids


def _print_table(header: tuple[str, ...], rows: list[tuple]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in (header, *rows):
        cells = [str(x).ljust(w) for x, w in zip(row, widths)]
        print("  ".join(cells).rstrip())


if __name__ == "__main__":
    sys.exit(main())
