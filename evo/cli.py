"""The ``evo`` command line.

Each subcommand is a small function ``cmd_<name>(args) -> int``; ``main`` maps bad input
(an ``EvoError``) to one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
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


def _print_table(header: tuple[str, ...], rows: list[tuple]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in (header, *rows):
        cells = [str(x).ljust(w) for x, w in zip(row, widths)]
        print("  ".join(cells).rstrip())


if __name__ == "__main__":
    sys.exit(main())
