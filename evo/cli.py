"""The ``evo`` command line.

``build_parser`` describes every subcommand; each runs a small function
``evo.commands.cmd_<name>(args) -> int``. ``main`` turns an error into one line on stderr,
never a traceback, and an exit status from ``evo.exit_codes`` (bad input: a usage error;
a tool, GPU or file that failed: a runtime failure).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from evo import commands, exit_codes, store_commands, strategies
from evo.config import Config
from evo.model import commands as model_commands
from evo.strategies import NAMES as STRATEGIES
from evo.strategies.oracle import KERNELS as ORACLE_KERNELS
from genomes.errors import EvoError
from harness.backends import BACKENDS

KERNEL_HELP = "a suite kernel's name (see `evo kernels`), or a spec (.toml) or PTX file"

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
        return exit_codes.USAGE
    args.argv = ["evo", *map(str, sys.argv[1:] if argv is None else argv)]  # for meta.json
    try:
        return args.func(args)
    except EvoError as err:
        print(f"evo: error: {err}", file=sys.stderr)
        return exit_codes.for_error(err)
    except BrokenPipeError:  # e.g. `evo store stats runs/store.sqlite | head`
        sys.stderr.close()  # nothing more can be printed; say nothing at exit either
        return exit_codes.OK
    except OSError as err:  # a path no command foresaw (read-only, vanished): still one line
        where = f" {err.filename}" if err.filename else ""
        print(f"evo: error: cannot use{where}: {err.strerror or err}; check the path and its "
              f"permissions", file=sys.stderr)
        return exit_codes.for_error(err)
    except sqlite3.DatabaseError as err:  # damage the store's check at open did not see
        print(f"evo: error: the measurement store failed ({err}): `evo store check PATH` "
              f"looks for damage and `evo store repair PATH` keeps what can be read",
              file=sys.stderr)
        return exit_codes.for_error(err)
    except KeyboardInterrupt as err:
        print("evo: interrupted", file=sys.stderr)
        return exit_codes.for_error(err)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, exiting with evo's usage-error status (subparsers inherit it)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(exit_codes.USAGE, f"{self.prog}: error: {message}{_genome_hint(message)}\n")


def _genome_hint(message: str) -> str:
    """Where an unrecognized argument reads as genes (``evo measure k.toml 'vec_ld'``): the
    commands but ``apply`` take a genome after ``--genome``."""
    extra = message.removeprefix("unrecognized arguments: ")
    if extra == message or "." in extra or "/" in extra:  # not that error, or a path
        return ""
    from genomes.variation import gene_alphabet

    names = {gene.split("(")[0] for gene in map(str, gene_alphabet())}
    if extra.split("(")[0].split(",")[0].strip() not in names:
        return ""
    return f" (a genome goes after --genome: --genome '{extra}')"


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default appended, unless its help already says it or there is none to
    say (None, False: no "(default: None)" noise); texts laid out in lines kept as written."""

    def _fill_text(self, text, width, indent):
        if "\n" in text.strip():
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)

    def _get_help_string(self, action):
        text = action.help or ""
        nothing = (any(action.default is x for x in (None, False, argparse.SUPPRESS))  # not 0
                   or action.default == "")
        if ("default" in text.lower() or nothing
                or not (action.option_strings or action.nargs in ("?", "*"))):
            return text
        return text + " (default: %(default)s)"


class _Version(argparse.Action):
    """``--version``: the version is looked up only when asked (importlib.metadata is slow)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kw):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print evo's version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        from evo import version

        print(f"evo {version()}")
        parser.exit(exit_codes.OK)


def _config_default(key: str) -> str:
    """How a run flag without its own default is resolved: the config file, else built in."""
    value = getattr(Config().run, key)
    value = ",".join(map(str, value)) if isinstance(value, list) else value
    return f" (default: [run] {key} of the config, else {value})".replace("%", "%%")


def _json_flag(p: argparse.ArgumentParser, only: str = "") -> None:
    p.add_argument("--json", action="store_true",
                   help=f"{only}print one JSON document (the same facts as the text) instead")



def _add_where_to_measure(p, cluster_default: str, caches_default=None) -> None:
    """--caches and --cluster, shared by run and bench."""
    p.add_argument("--caches", choices=("spec", "warm", "cold"), default=caches_default,
                   help="the L2 when timing: spec (each spec's own `caches`, default), warm "
                        "(launches reuse their data, which stays in the L2 when it fits) or "
                        "cold (every launch reads its inputs from DRAM)")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="measure on a Dask cluster: local or local:N (N worker processes here; "
                        "local alone: one per GPU), or a scheduler's tcp://HOST:PORT (README: "
                        "one worker per GPU); needs pip install 'evo-ptx[cluster]' "
                        + cluster_default)

def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="evo", description=DESCRIPTION, epilog=exit_codes.epilog(),
                     formatter_class=_Formatter)
    parser.add_argument("--version", action=_Version)
    commands_ = parser.add_subparsers(title="commands", metavar="COMMAND")

    def command(name: str, help: str, **kw) -> argparse.ArgumentParser:
        # every subcommand's own --help shows its summary and the defaults
        kw.setdefault("description", help[:1].upper() + help[1:] + ".")
        return commands_.add_parser(name, help=help, formatter_class=_Formatter, **kw)

    p = command("transforms", "list the transform library")
    _json_flag(p)
    p.set_defaults(func=commands.cmd_transforms)

    p = command("kernels", "list the built-in kernel suite")
    _json_flag(p)
    p.set_defaults(func=commands.cmd_kernels)

    p = command("init-kernel", "write a spec skeleton (TOML) for a PTX kernel")
    p.add_argument("ptx", type=Path, metavar="PTX", help="the PTX file to describe")
    p.add_argument("--entry", help="the .entry to describe (needed when the PTX has several)")
    p.add_argument("-o", "--output", type=Path,
                   help="where to write it (default: beside the PTX, same name, .toml)")
    p.set_defaults(func=commands.cmd_init_kernel)

    p = command("apply", "apply a genome to a kernel's PTX and print the result")
    p.add_argument("genome", metavar="GENOME", help="the genes to apply (a JSON file or string, "
                   "or an inline list such as 'vec_ld,maxnreg(n=128)')")
    p.add_argument("kernel", metavar="KERNEL", help=KERNEL_HELP)
    p.add_argument("-o", "--output", type=Path, help="write the PTX here instead of stdout")
    p.set_defaults(func=commands.cmd_apply)

    p = command("compile", "assemble a kernel (optionally with a genome) with ptxas and "
                           "print its resource report")
    p.add_argument("kernel", metavar="KERNEL", help=KERNEL_HELP)
    p.add_argument("--genome", metavar="GENOME", help="apply this genome first")
    p.add_argument("--arch", default="sm_90", help="target architecture (default sm_90; PTX "
                   "with an arch-specific .target such as sm_90a is assembled for that target)")
    _json_flag(p)
    p.set_defaults(func=commands.cmd_compile)

    p = command("measure", "check and time a kernel (optionally with a genome) and its "
                           "baseline, through the measurement store")
    p.add_argument("kernel", metavar="KERNEL", help=KERNEL_HELP)
    p.add_argument("--genome", metavar="GENOME", help="apply this genome first")
    p.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="gpu: measure; replay: answer from the store only; static: no GPU, a "
                        "ptxas/SASS cost estimate; auto (default): gpu if CuPy sees one, else static")
    p.add_argument("--store", type=Path, metavar="PATH",
                   help="measurement store (default $EVO_STORE or runs/store.sqlite)")
    p.add_argument("--gpu", type=int, default=0, metavar="ID", help="CUDA device id (default 0)")
    p.add_argument("--device", metavar="NAME", help="replay: the device whose measurements to use "
                                                    "(default: the store's only GPU device)")
    p.add_argument("--seed", type=int, default=0, help="seed for the check and timing inputs")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="where the time went: the host's stages (apply, ptxas, backend, store) "
                        "and the GPU worker's phases (inputs, upload, launch, compare, timing, "
                        "reuse probe, stress check ...)")
    _json_flag(p)
    p.set_defaults(func=commands.cmd_measure)

    p = command("stability", "the same variant in several fresh GPU worker processes: how "
                             "far apart its figures read (GPU only)")
    p.add_argument("kernel", metavar="KERNEL", help=KERNEL_HELP)
    p.add_argument("--genome", metavar="GENOME", help="apply this genome first")
    p.add_argument("--workers", type=int, default=5, help="fresh worker processes (default 5)")
    p.add_argument("--repeats", type=int, default=3, help="measurements per worker (default 3)")
    p.add_argument("--own-arena", action="store_true",
                   help="each worker allocates its own buffers instead of the keeper's arena "
                        "(shows what buffer placement alone does to the figure)")
    p.add_argument("--gpu", type=int, default=0, metavar="ID", help="CUDA device id (default 0)")
    p.set_defaults(func=commands.cmd_stability)

    p = command("run", "evolve the kernels of the suite (the main job)",
                description="Search for faster variants of every kernel in the config's "
                       "suite (or --kernel), measuring each candidate; writes runs/<name>/.")
    p.add_argument("--config", type=Path, default=None,
                   help="config file (default ./evo.toml if present, else built-in defaults)")
    p.add_argument("--kernel", action="append", metavar="KERNEL",
                   help="evolve this kernel instead of the suite (repeatable; globs allowed)"
                   + _config_default("suite"))
    p.add_argument("--model", type=Path, metavar="DIR",
                   help="evolve the kernels of a capture folder (evo.capture: a torch.compile'd "
                        "program's Triton kernels), the largest share of its step first; the "
                        "same as --kernel DIR")
    p.add_argument("--strategy", choices=STRATEGIES,
                   help="; ".join(f"{name}: {strategies.summary(name)}" for name in STRATEGIES)
                   + _config_default("strategy"))
    p.add_argument("--generations", type=int,
                   help="generations per kernel (evolve)" + _config_default("generations"))
    p.add_argument("--pop", type=int, help="population size (evolve)" + _config_default("pop"))
    p.add_argument("--max-evals", type=int,
                   help="evaluations per kernel, 0 = no cap" + _config_default("max_evals"))
    p.add_argument("--budget-evals", type=int, metavar="N",
                   help="evaluations for all kernels together, split by their share of the "
                        "step (--model); replaces --max-evals" + _config_default("budget_evals"))
    p.add_argument("--budget-minutes", type=float, metavar="M",
                   help="wall minutes for the searches from the run's start (or resume): past "
                        "them each search ends after its current generation (a kernel started "
                        "later measures its first generation only); what fits depends on the "
                        "machine" + _config_default("budget_minutes"))
    p.add_argument("--seed", type=int,
                   help="every random choice flows from this seed" + _config_default("seed"))
    p.add_argument("--llm-rate", type=float, metavar="P",
                   help="probability that a child is mutated by the LLM ([llm] in evo.toml "
                        "says which endpoint and model; default: [llm] rate of the config, "
                        "else 0: no LLM)")
    p.add_argument("--backend", choices=BACKENDS,
                   help="gpu: measure; replay: answer from the store only; static: no GPU, a "
                        "ptxas/SASS cost estimate; auto: gpu if CuPy sees one, else static"
                   + _config_default("backend"))
    p.add_argument("--gpus", type=_gpu_ids, metavar="IDS",
                   help="comma-separated GPU ids, one worker each (e.g. 0,1)"
                   + _config_default("gpus"))
    p.add_argument("--store", help="measurement store (SQLite), shared across runs"
                   + _config_default("store"))
    p.add_argument("--jobs", type=int, metavar="N",
                   help="kernels searched at once, each in its own thread; what each finds "
                        "does not depend on it; 0: four per GPU or cluster worker, one with "
                        "the LLM on (default: [run] jobs of the config, else 0)")
    p.add_argument("--priors", metavar="auto|none|FILE",
                   help="learn from other kernels' results (evolve): auto (default: the "
                        "priors shipped with evo plus this store), none (a cold start), or a "
                        "priors file (evo priors build) or store")
    _add_where_to_measure(p, "(default: [cluster] address of the config, else this machine's "
                             "GPUs; may change on --resume)")
    p.add_argument("--out", type=Path, help="run folder (default runs/<timestamp>)")
    p.add_argument("--resume", type=Path, metavar="RUN",
                   help="continue RUN from its last checkpoint (a larger --generations extends it)")
    p.add_argument("--from-previous", action="store_true",
                   help="with --resume: use the previous checkpoint (if the last is damaged)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress output (the final table is still printed)")
    p.add_argument("-v", "--verbose", action="store_true", help="a line per generation")
    p.set_defaults(func=commands.cmd_run)

    p = command("bench", "strategies side by side on the same kernels and GPU; writes "
                         "OUT/results.json and OUT/bench.md")
    p.add_argument("--suite", default="gemm64",
                   help="gemm64 (the 64 {2,4,6,8}^3 tiles), gemm_large, many (the many-thread "
                        "kernels), or comma-separated kernel names")
    p.add_argument("--strategies", default="sweep,greedy,evolve_matched,evolve45",
                   help="comma-separated: sweep, greedy, evolve_matched (greedy's budget), "
                        "evolve_ls (the same with a local search on the best), evolve_sweep "
                        "(evolve_ls starting from a sweep of single genes), evolve45 "
                        "(9 generations x pop 5), mcgs45 (Monte-Carlo graph search, 9 x 5), "
                        "policy1 (one rollout of a trained policy), policy45 (its rollouts, "
                        "9 x 5), oracle (exhaustive, only on the --oracle-kernels), "
                        "evolve45_priors and mcgs45_priors (with --priors), or any other "
                        "strategy of evo run")
    p.add_argument("--oracle-kernels", default=",".join(ORACLE_KERNELS),
                   help="the kernels the oracle runs on (comma-separated)")
    p.add_argument("--oracle-genomes", type=Path, metavar="PLAN",
                   help="measure one genome per distinct machine code of the oracle's space, "
                        "from a plan that python3 -m evo.oracle_plan wrote on a CPU (the same "
                        "best, about a quarter of the GPU host's ptxas time)")
    p.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="gpu: measure; replay: answer from --store only (engine changes "
                        "tried offline on kept, merged stores); static: no GPU, estimates")
    p.add_argument("--store", type=Path, metavar="PATH",
                   help="replay: the measurement store to answer from (see evo store merge)")
    p.add_argument("--device", metavar="NAME",
                   help="replay: the device whose measurements to use (default: the only one)")
    p.add_argument("--seed", type=int, default=1, help="every random choice flows from this seed")
    _add_where_to_measure(p, "", caches_default="spec")
    p.add_argument("--keep-stores", action="store_true",
                   help="keep every strategy's measurement store in OUT/stores/ (for replay, "
                        "evo priors build, evo train policy; with the features of kernels "
                        "outside the suite beside them)")
    p.add_argument("--limit", type=int, default=0,
                   help="stop after this many kernels this call (0 = all); run again to go on")
    p.add_argument("--jobs", type=int, default=8, metavar="N",
                   help="kernels searched at once; measurements still one at a time per GPU "
                        "(default 8)")
    p.add_argument("--priors", default="loo", metavar="loo|FILE",
                   help="the priors of the *_priors strategies: loo (default: leave-one-out, "
                        "built from --priors-from without the kernel under test) or a priors "
                        "file or store")
    p.add_argument("--policy", default="loo", metavar="loo|FILE",
                   help="the policy of policy1/policy45: loo (default: one trained per kernel "
                        "without its results, from --priors-from or the priors shipped with "
                        "evo; needs PyTorch) or a policy file")
    p.add_argument("--priors-from", metavar="STORES",
                   help="loo: comma-separated stores to learn from (default: --store with "
                        "--backend replay, else this bench's own stores of its other "
                        "strategies, kept in OUT/stores/; the *_priors strategies then run "
                        "after the others have finished every kernel)")
    p.add_argument("--out", type=Path, required=True, help="bench folder (results.json is "
                   "read back, so a second call continues where the first stopped)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress lines (bench.md is still printed)")
    p.set_defaults(func=commands.cmd_bench)

    store_commands.add_parsers(command, _json_flag)  # store, priors, train

    p = command("show", "table of a run's kernels: baseline, best, speedup, genome")
    p.add_argument("run", type=Path, metavar="RUN", help="a run folder (runs/<name>)")
    _json_flag(p)
    p.set_defaults(func=commands.cmd_show)

    p = command("diff", "what a run's best variant of KERNEL changed: the baseline -> best "
                        "diff of its PTX and of its SASS, with the genome and its reduced form")
    p.add_argument("run", type=Path, metavar="RUN", help="a run folder (runs/<name>)")
    p.add_argument("kernel", metavar="KERNEL", help="a kernel of the run")
    p.add_argument("--context", type=int, default=3, metavar="N",
                   help="lines of context around each change (default 3)")
    p.add_argument("--no-sass", action="store_true",
                   help="the PTX diff only (no ptxas or cuobjdump run)")
    p.set_defaults(func=commands.cmd_diff)

    p = command("prompt", "print the exact messages evo would send the LLM for KERNEL now "
                          "(no call is made)")
    p.add_argument("kernel", metavar="KERNEL", help="a suite name or a spec (.toml)")
    p.add_argument("--run", type=Path, metavar="RUN",
                   help="as in this run: its [llm] config, the kernel's results so far, its "
                        "best genome as the parent and the LLM's history (default: a fresh "
                        "search, nothing measured)")
    p.add_argument("--config", type=Path, default=None,
                   help="without --run: config file (default ./evo.toml if present, else "
                        "built-in defaults)")
    p.add_argument("--genome", metavar="GENOME", help="the parent (default: the run's best, "
                                                        "else the baseline)")
    p.add_argument("--mode", choices=("full", "explore"), default="full",
                   help="full context, or explore mode's little context and bold request "
                        "([llm] explore) (default: full)")
    p.add_argument("--other", metavar="GENOME",
                   help="a second parent: the crossover prompt ([llm] crossover)")
    p.add_argument("--ncu", action="store_true",
                   help="profile the parent with Nsight Compute first and quote it, as "
                        "[llm] ncu_every does in a run (a GPU machine with ncu)")
    _json_flag(p)
    p.set_defaults(func=_prompt)

    p = command("export", "write a run's best variant of a kernel for use in a program: "
                          "PTX, cubin, launch shape and a CuPy loader (load_KERNEL.py)")
    p.add_argument("run", type=Path, metavar="RUN", help="a run folder (runs/<name>)")
    p.add_argument("kernel", metavar="KERNEL", help="a kernel of that run (evo show RUN lists them)")
    p.add_argument("-o", "--out", type=Path, metavar="DIR",
                   help="folder to write into (default: RUN/export/KERNEL)")
    p.add_argument("--triton-dump", type=Path, metavar="DIR",
                   help="a Triton kernel: the TRITON_DUMP_DIR of a run of your program with "
                        "TRITON_KERNEL_DUMP=1; writes an override folder so that Triton "
                        "launches the evolved PTX (TRITON_KERNEL_OVERRIDE=1)")
    p.set_defaults(func=_export)

    model_commands.add_parsers(command)  # capture, verify, install

    p = command("plot", "write fitness curves (plots/<kernel>.png) and a speedup summary "
                        "(plots/summary.png) for one or more runs; for an evo bench folder, "
                        "best-so-far curves per strategy and plots/reduction.png")
    p.add_argument("runs", type=Path, nargs="+", metavar="RUN",
                   help="run folders or evo bench folders")
    p.add_argument("--kernels", help="bench folders: comma-separated kernels to draw "
                                     "(default: the first 4)")
    p.set_defaults(func=commands.cmd_plot)
    return parser


def _prompt(args) -> int:
    from evo.llm.preview import cmd_prompt

    return cmd_prompt(args)


def _export(args) -> int:
    from evo.export import cmd_export

    return cmd_export(args)


def _gpu_ids(text: str) -> list[int]:
    """``0,1`` -> [0, 1] (argparse turns the error into one usage line)."""
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"GPU ids are comma-separated integers, got {text!r}")
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"GPU ids are integers >= 0, got {text!r}")
    return ids


if __name__ == "__main__":
    sys.exit(main())
