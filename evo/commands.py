"""What each ``evo`` subcommand does: ``cmd_<name>(args) -> int``, one per subcommand.

``evo.cli`` builds the parser and maps each subcommand here; bad input is an ``EvoError``,
which ``evo.cli.main`` turns into one line on stderr and exit status 2.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from genomes.errors import EvoError


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


def cmd_stability(args) -> int:
    """Fresh workers, same variant: the spread a fitness difference must beat."""
    from genomes.genome import Genome, load_genome
    from harness.stability import format_report, measure_stability
    from harness.suite import find_kernel

    if args.workers < 1 or args.repeats < 1:
        raise EvoError("--workers and --repeats must be at least 1")
    spec = find_kernel(args.kernel)
    genome = load_genome(args.genome) if args.genome else Genome()
    from harness.worker import WorkerStartError

    try:
        report = measure_stability(spec, genome, args.workers, args.repeats, args.gpu,
                                   keep_arena=not args.own_arena,
                                   progress=lambda line: print(line, file=sys.stderr))
    except WorkerStartError as err:
        raise EvoError(f"evo stability measures on a GPU, and none could be used: "
                       f"{str(err).split('; install')[0]}") from None
    print(format_report(report))
    return 0 if report.figures() else 1


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
            from harness.backends import make_backend
            from harness.store import Store

            if args.store is None or not args.store.is_file():
                raise EvoError(f"evo bench --backend replay needs --store PATH, an existing "
                               f"measurement store (got {args.store})")
            backend = make_backend("replay", store=stack.enter_context(Store(args.store)),
                                   device=args.device)
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


def _print_table(header: tuple[str, ...], rows: list[tuple]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in (header, *rows):
        cells = [str(x).ljust(w) for x, w in zip(row, widths)]
        print("  ".join(cells).rstrip())
