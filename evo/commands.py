"""What each ``evo`` subcommand does: ``cmd_<name>(args) -> int``, one per subcommand.

``evo.cli`` builds the parser and maps each subcommand here; bad input is an ``EvoError``,
which ``evo.cli.main`` turns into one line on stderr; exit statuses: ``evo.exit_codes``.
``--json`` documents are built by ``evo.json_output``.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from genomes.errors import EvoError, RuntimeFailure

from evo import exit_codes, json_output
from evo.checkpoint import LLM
from evo.kernel_args import kernel_launch, kernel_ptx, parse, write_output


def cmd_transforms(args) -> int:
    from genomes import transforms

    if args.json:
        return json_output.emit(json_output.transforms_doc())
    rows = [(t.name, t.group or "-", " ".join(p.describe() for p in t.params) or "-",
             t.summary) for t in transforms.registry().values()]
    print_table(("transform", "group", "params", "what it does"), rows)
    aliases = ", ".join(f"{a}={t}({','.join(f'{k}={v}' for k, v in p.items())})"
                        for a, (t, p) in sorted(transforms.ALIASES.items()))
    print(f"\naliases: {aliases}")
    return exit_codes.OK


def cmd_kernels(args) -> int:
    from harness.kernels.suite import list_kernels

    if args.json:
        return json_output.emit(json_output.kernels_doc())
    from harness.kernels.resize import can_resize

    kernels = list_kernels()
    rows = [(k.name, "x".join(map(str, k.grid)), "x".join(map(str, k.block)), k.timing,
             k.description) for k in kernels]
    print_table(("kernel", "grid", "block", "timer", "description"), rows)
    resizable = [k.name for k in kernels if can_resize(k)]
    if resizable:  # a hint on stderr: stdout stays the table alone, for scripts
        print(f"At another size, counted in elements (e.g. --kernel {resizable[0]}@16M): "
              f"{', '.join(resizable)}", file=sys.stderr)
    return exit_codes.OK


def cmd_init_kernel(args) -> int:
    from harness.kernels.spec import read_ptx
    from harness.kernels.spec_ptx import spec_skeleton

    if not args.ptx.is_file():
        raise EvoError(f"no such PTX file: {args.ptx}")
    out = args.output or args.ptx.with_suffix(".toml")
    if out.exists():
        raise EvoError(f"{out} exists; remove it or pass -o")
    write_output(out, spec_skeleton(read_ptx(args.ptx), args.entry, args.ptx.name))
    print(f"wrote {out}: fill in every TODO (buffer counts and roles, scalar values, "
          f"grid and block), then `evo measure {out}`")
    return exit_codes.OK


def cmd_apply(args) -> int:
    from genomes.genome import apply_genome, load_genome

    genome = load_genome(args.genome)
    ptx_text, source = kernel_ptx(args.kernel)
    launch = kernel_launch(args.kernel)
    applied = apply_genome(parse(ptx_text, source), genome, launch)
    for outcome in applied.outcomes:
        extra = f" ({outcome.changes} changes)" if outcome.changes else ""
        detail = f": {outcome.detail}" if outcome.detail else ""
        print(f"{outcome.gene}: {outcome.status}{extra}{detail}", file=sys.stderr)
    if applied.launch is not None:
        was = "" if applied.launch == launch else f" (the spec's: {launch})"
        print(f"launch: {applied.launch}{was}", file=sys.stderr)
    if args.output:
        write_output(args.output, applied.ptx)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(applied.ptx)
    return exit_codes.OK


def cmd_compile(args) -> int:
    from harness.compile import compile_ptx

    ptx_text, source = kernel_ptx(args.kernel)
    if args.genome:
        from genomes.genome import apply_genome, load_genome

        ptx_text = apply_genome(parse(ptx_text, source), load_genome(args.genome),
                                kernel_launch(args.kernel)).ptx
    result = compile_ptx(ptx_text, args.arch)
    if args.json:
        json_output.emit(json_output.compile_doc(source, result))
        return exit_codes.OK if result.ok else exit_codes.FAILURE
    if not result.ok:
        error = result.error
        if not args.genome and Path(args.kernel).suffix != ".ptx":  # the spec's own baseline
            from harness.kernels.spec_ptx import in_file_lines
            from harness.kernels.suite import find_kernel

            error = in_file_lines(find_kernel(args.kernel), error)
        print(f"ptxas failed: {error}")
        return exit_codes.FAILURE
    print(f"kernel:        {source}")
    print(f"arch:          {result.arch}")
    print(f"registers:     {result.registers}")
    print(f"spill stores:  {result.spill_stores} B")
    print(f"spill loads:   {result.spill_loads} B")
    print(f"stack frame:   {result.stack_frame} B")
    print(f"shared memory: {result.shared_mem} B")
    print(f"cubin:         {len(result.cubin)} B, ptxas {result.seconds * 1000:.0f} ms")
    return exit_codes.OK


def cmd_measure(args) -> int:
    """Measure one variant and the baseline; static estimates are labelled as such, and the
    static backend says that it checked no output (no GPU ran the kernel)."""
    import time

    from genomes.genome import Genome, load_genome
    from harness.kernels.suite import find_kernel

    from evo.kernel_run import one_evaluator, store_path as where

    spec = find_kernel(args.kernel)
    genome = load_genome(args.genome) if args.genome else Genome()
    store_path = Path(where(args.store))
    with one_evaluator(args.backend, store_path, args.gpu, args.device,
                       args.seed) as (evaluator, backend):
        start = time.perf_counter()
        base = evaluator.baseline(spec)
        base_seconds, start = time.perf_counter() - start, time.perf_counter()
        m = evaluator.evaluate(spec, [genome])[0]
        variant_seconds = time.perf_counter() - start
    static = m.is_static or backend.name == "static" or (backend.device == "static")
    if args.json:
        json_output.emit(json_output.measure_doc(spec, genome, m, base, backend, store_path,
                                                 static))
        return exit_codes.OK if m.valid else exit_codes.FAILURE
    tag = "static estimate, not measured"

    def say(line: str, estimate: bool = False) -> None:
        # Cycle figures say they are estimates when they are; ptxas's registers and spills
        # are exact on every backend.
        if static and estimate and tag not in line:
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
        say(f"cycles:     {m.label()}, {spread}, n={m.n}", estimate=True)
    say(f"registers:  {m.registers if m.registers is not None else '-'}")
    say(f"spills:     {m.spill_stores or 0} B stored, {m.spill_loads or 0} B loaded")
    if static and m.valid:
        say("valid:      not checked: no GPU ran the kernel (static backend); it assembles")
    else:
        say(f"valid:      {'yes' if m.valid else 'no'} ({m.reason})")
    for flag in m.flags:
        say(f"flag:       {flag}")
    say(f"baseline:   {base.label()}", estimate=True)
    if m.valid and base.valid and m.cycles and base.cycles:
        say(f"speedup:    {base.cycles / m.cycles:.2f}x vs baseline", estimate=True)
    say(f"store:      {store_path} ({'cached' if m.cached else 'new'})")
    if args.verbose:
        for line in _time_lines(base, base_seconds, m, variant_seconds, evaluator.stats):
            say(line)
    return exit_codes.OK if m.valid else exit_codes.FAILURE


def _time_lines(base, base_seconds: float, m, seconds: float, stats) -> list[str]:
    """Where ``evo measure``'s time went (``-v``): the host's stages of the variant's
    evaluation, then the worker's phases of each fresh measurement (``harness.phases``)."""
    from harness.phases import format_phases

    lines = [f"time:       baseline {base_seconds:.3f} s (starting the backend included), "
             f"variant {seconds:.3f} s"]
    other = seconds - stats.apply_seconds - stats.compile_seconds - stats.measure_seconds
    lines.append(f"  variant on the host: apply {stats.apply_seconds * 1e3:.1f} ms, ptxas "
                 f"{stats.compile_seconds * 1e3:.1f} ms, backend {stats.measure_seconds * 1e3:.1f} ms"
                 + (f" (the measurement itself {m.seconds * 1e3:.1f} ms)"
                    if stats.measure_seconds and not m.cached else "")
                 + f", store and the rest {max(other, 0) * 1e3:.1f} ms")
    for label, which in (("variant", m), ("baseline", base)):
        phases = which.notes.get("phases")
        if which.cached or not phases:
            lines.append(f"  {label} in the worker: "
                         + ("answered from the store" if which.cached else "no phases recorded"))
            continue
        lines.append(f"  {label} in the worker ({sum(phases.values()) * 1e3:.1f} ms):")
        lines += format_phases(phases, indent="    ")
    return lines


def cmd_stability(args) -> int:
    """Fresh workers, same variant: the spread a fitness difference must beat."""
    from genomes.genome import Genome, load_genome
    from harness.gpu.stability import format_report, measure_stability
    from harness.kernels.suite import find_kernel

    if args.workers < 1 or args.repeats < 1:
        raise EvoError("--workers and --repeats must be at least 1")
    spec = find_kernel(args.kernel)
    genome = load_genome(args.genome) if args.genome else Genome()
    from harness.gpu.worker import WorkerStartError

    try:
        report = measure_stability(spec, genome, args.workers, args.repeats, args.gpu,
                                   keep_arena=not args.own_arena,
                                   progress=lambda line: print(line, file=sys.stderr))
    except WorkerStartError as err:
        raise RuntimeFailure(f"evo stability measures on a GPU, and none could be used: "
                             f"{str(err).split('; install')[0]}") from None
    print(format_report(report))
    return exit_codes.OK if report.figures() else exit_codes.FAILURE


def cmd_run(args) -> int:
    from evo import config as config_mod
    from evo import run, runmeta
    from evo.run_kernels import anchored

    flags = {"generations": args.generations, "pop": args.pop, "max_evals": args.max_evals,
             "budget_evals": args.budget_evals, "budget_minutes": args.budget_minutes,
             "seed": args.seed, "backend": args.backend, "gpus": args.gpus,
             "store": args.store, "strategy": args.strategy,
             "suite": (args.kernel or []) + ([str(args.model)] if args.model else []) or None,
             "priors": args.priors, "caches": args.caches, "jobs": args.jobs}
    verbosity = 0 if args.quiet else (2 if args.verbose else 1)
    if args.resume:
        budget = {k: v for k, v in flags.items()
                  if k in ("generations", "max_evals", "budget_evals", "budget_minutes", "jobs")}
        changed = [k for k, v in {**flags, "llm_rate": args.llm_rate}.items()
                   if v is not None and k not in budget]
        if changed:
            raise EvoError(f"--resume keeps the run's config; only --generations, "
                           f"--max-evals, --budget-evals, --budget-minutes, --jobs and --cluster "
                           f"may be given (got "
                           f"--{changed[0].replace('_', '-')})")
        rundir, config, checkpoint = run.resume_run(args.resume, budget, args.from_previous)
        if args.cluster is not None:  # where to measure may change, what is measured not
            config = config.override("cluster", address=args.cluster)
    else:
        path = args.config or (Path("evo.toml") if Path("evo.toml").is_file() else None)
        config = config_mod.load(path).override("run", **flags)
        if args.cluster is not None:
            config = config.override("cluster", address=args.cluster)
        if args.llm_rate is not None:
            config = config.override("llm", rate=args.llm_rate)
        # kernels named by path are kept absolute in the run's config.toml
        config = config.override("run", suite=anchored(config.run.suite))
    try:
        if args.resume:
            with runmeta.recorded(rundir, getattr(args, "argv", None), True):
                results = run.execute(rundir, config, checkpoint, verbosity)
        else:
            rundir, results = run.start_and_execute(config, args.out, verbosity,
                                                    getattr(args, "argv", None))
    except KeyboardInterrupt:
        return exit_codes.INTERRUPTED
    from evo.report import render_table

    print(render_table(results))  # -q silences progress, never the answer
    print(f"\nrun folder: {rundir.path} (evo show / evo plot {rundir.path})")
    if args.model:  # a capture's kernels: back into the program they came from
        print(f"next: evo verify --model {args.model} --run {rundir.path} -- python app.py ARGS")
    failed = [r.kernel for r in results if not (r.baseline or {}).get("valid")]
    if failed:  # the others ran and are reported; the run as a whole did not succeed
        print(f"evo: error: the baseline of {', '.join(failed)} failed (the table says why); "
              f"{len(results) - len(failed)} other kernel(s) ran", file=sys.stderr)
        return exit_codes.FAILURE
    return exit_codes.OK


def _oracle_plan(path: Path, kernels: set[str]) -> Path:
    """``path``, once it is a plan (``evo.oracle_plan``) holding every oracle kernel of this
    bench; says which ptxas grouped it and which one compiles here."""
    from evo.oracle_plan import load_plan
    from harness.toolchain import ptxas_version

    plan = load_plan(path)
    missing = sorted(kernels - set(plan["kernels"]))
    if missing:
        raise EvoError(f"the oracle plan {path} has no entry for {', '.join(missing)}: "
                       f"python3 -m evo.oracle_plan --kernels {','.join(missing)} -o {path}")
    here = ptxas_version()
    print(f"oracle: one genome per distinct machine code, from {path} (grouped by "
          f"{plan.get('ptxas', '?')}; compiling here with {here}"
          f"{'' if plan.get('ptxas') == here else ': NOT the same ptxas'})", file=sys.stderr)
    return path


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
    from harness.kernels.suite import find_kernel

    for k in kernels:
        find_kernel(k)  # an unknown name fails here, before any measuring
    done = args.out / "results.json"
    finished = set(json.loads(done.read_text())["kernels"]) if done.exists() else set()
    todo = [k for k in kernels if k not in finished] + [k for k in kernels if k in finished]
    if args.limit:
        todo = todo[:args.limit]
    base = config_mod.Config().override("run", seed=args.seed, caches=args.caches)
    if args.cluster:
        base = base.override("cluster", address=args.cluster)
    oracle = {k.strip() for k in args.oracle_kernels.split(",") if k.strip()}
    if args.oracle_genomes and "oracle" in strategies:
        base = base.override("oracle", genomes=str(_oracle_plan(args.oracle_genomes, oracle
                                                                 & set(kernels))))
    named = [Path(x.strip()) for x in (args.priors_from or "").split(",") if x.strip()]
    priors = None
    if any(s in bench.WITH_PRIORS for s in strategies):
        from evo.learn.source import BenchPriors

        learn_from = named
        if args.priors == "loo" and not named and args.backend == "replay" and args.store:
            learn_from = [args.store]  # replay: the store answering is the one to learn from
        priors = BenchPriors(args.priors, kernels, learn_from, oracle)
    policies = None
    if any(s in bench.POLICY_ARMS for s in strategies):
        from evo.learn.policy_train import BenchPolicies

        policies = BenchPolicies(args.policy, args.out / "policies", named)
        policies.prepare(todo, _progress(args.quiet))
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
                                  progress=_progress(args.quiet),
                                  oracle_kernels=oracle, jobs=args.jobs, backend=backend,
                                  # loo from the bench's own stores needs them kept
                                  keep_stores=args.keep_stores or bool(
                                      priors and priors.own_stores()), priors=priors,
                                  policies=policies)
    print((args.out / "bench.md").read_text())
    left = [k for k in kernels if k not in results["kernels"]]
    if left:
        print(f"{len(left)} kernels left: run the same command again to continue")
    return exit_codes.OK


def cmd_show(args) -> int:
    import tomllib

    from evo.report import llm_lines, reduced_lines, render_table, results_from_checkpoint
    from evo.rundir import RunDir

    rundir = RunDir.open(args.run)
    strategy = tomllib.loads(rundir.config_text())["run"]["strategy"]
    results = results_from_checkpoint(rundir, strategy)
    if args.json:
        return json_output.emit(json_output.show_doc(rundir, strategy, results,
                                                     rundir.read_checkpoint().get(LLM)))
    print(render_table(results))
    checkpoint = rundir.read_checkpoint()
    for line in llm_lines(checkpoint.get(LLM)) + reduced_lines(checkpoint):
        print(line)
    return exit_codes.OK


def cmd_diff(args) -> int:
    from evo.diff import diff_lines
    from evo.rundir import RunDir

    if args.context < 0:
        raise EvoError("--context must be 0 or more")
    for line in diff_lines(RunDir.open(args.run), args.kernel, args.context, not args.no_sass):
        print(line)
    return exit_codes.OK


def cmd_plot(args) -> int:
    from evo.plots import plot_bench, plot_runs

    benches = [p for p in args.runs if (p / "results.json").is_file()]
    runs = [p for p in args.runs if p not in benches]
    kernels = [k.strip() for k in args.kernels.split(",")] if args.kernels else None
    written = [path for b in benches for path in plot_bench(b, kernels)]
    written += plot_runs(runs) if runs else []
    for path in written:
        print(f"wrote {path}")
    return exit_codes.OK


def _progress(quiet: bool):
    """Where progress lines go: stderr, or nowhere with -q (the results are still printed)."""
    return (lambda line: None) if quiet else (lambda line: print(line, file=sys.stderr))


def print_table(header: tuple[str, ...], rows: list[tuple]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in (header, *rows):
        cells = [str(x).ljust(w) for x, w in zip(row, widths)]
        print("  ".join(cells).rstrip())
