"""``evo store``, ``evo priors`` and ``evo train``: what runs leave behind, the measurement
stores, and the knowledge built from them (``cmd_<name>(args) -> int``, as
``evo.commands``); their command lines too (``add_parsers``, called by ``evo.cli``)."""

from __future__ import annotations

import sys
from pathlib import Path

from genomes.errors import EvoError

from evo import exit_codes, json_output
from evo.commands import print_table


def add_parsers(command, json_flag) -> None:
    """The store, priors and train subcommands: ``command(name, help)`` makes a parser
    (evo.cli's), ``json_flag(parser, only)`` adds its --json."""
    p = command("store", "inspect, merge, check, repair or prune measurement stores")
    p.add_argument("action", choices=("stats", "merge", "check", "repair", "forget"),
                   help="stats: rows per device and kernel; merge: copy SRC stores into PATH; "
                        "check: look for damage; repair: copy a damaged store's readable rows "
                        "into a fresh one (the damaged file is kept aside); forget: delete "
                        "the results matching --kernel, --reason and --genome (e.g. ones "
                        "recorded while a tool was broken), so the next run measures again")
    p.add_argument("path", type=Path, metavar="PATH",
                   help="the measurement store (merge: the one copied into)")
    p.add_argument("sources", type=Path, nargs="*", metavar="SRC",
                   help="merge: the stores to copy in")
    p.add_argument("--kernel", help="forget: this kernel's results")
    p.add_argument("--reason", help="forget: results whose reason starts so "
                                    "(e.g. 'ptxas error', 'launch error', 'ok')")
    p.add_argument("--genome", help="forget: the result of this genome (inline text; '' is the "
                                    "baseline), shared by every genome of the same code")
    p.add_argument("--device", help="forget: on this device only (default: every device)")
    json_flag(p, "stats: ")
    p.set_defaults(func=cmd_store)

    p = command("priors", "build or inspect priors: what genes did on other kernels (for "
                          "evo run --priors)")
    p.add_argument("action", choices=("build", "show"),
                   help="build: a priors file from measurement stores; show: a priors file's "
                        "kernels, or with --kernel the prior one kernel would get")
    p.add_argument("paths", type=Path, nargs="+", metavar="PATH",
                   help="build: the stores (or priors files) to learn from; show: a priors file")
    p.add_argument("-o", "--output", type=Path, help="build: the priors file to write")
    p.add_argument("--device", metavar="NAME", help="build: only this device's results; show: "
                   "the device the prior is for (default: the file's first)")
    p.add_argument("--exclude", metavar="KERNELS", default="",
                   help="comma-separated kernels left out (leave-one-out)")
    p.add_argument("--kernel", metavar="KERNEL", help="show: the prior this kernel would get")
    p.set_defaults(func=cmd_priors)

    p = command("train", "train a gene policy for evo run --strategy policy (needs PyTorch: "
                         "pip install 'evo-ptx[rl]')")
    p.add_argument("what", choices=("policy",), help="policy: (kernel features, genome so far) "
                   "-> next gene or stop, cloned from greedy's steps, then GRPO")
    p.add_argument("paths", type=Path, nargs="+", metavar="SOURCE",
                   help="measurement stores or priors files to learn from")
    p.add_argument("-o", "--output", type=Path, help="the policy file to write")
    p.add_argument("--device", metavar="NAME", help="only this device's results")
    p.add_argument("--exclude", metavar="KERNELS", default="",
                   help="comma-separated kernels left out (leave-one-out)")
    p.add_argument("--iterations", type=int, default=150, metavar="N", help="GRPO iterations "
                   "(default 150)")
    p.add_argument("--group", type=int, default=8, metavar="N",
                   help="GRPO rollouts per kernel and iteration (default 8)")
    p.add_argument("--hidden", type=int, default=64, metavar="N",
                   help="width of the network's two hidden layers (default 64)")
    p.add_argument("--validation", type=float, metavar="SHARE",
                   help="share of the kernels GRPO leaves out and chooses its weights on "
                        "(default: a quarter; 0: chosen on the kernels it trained on)")
    p.add_argument("--seed", type=int, default=0, help="every random choice of training")
    p.set_defaults(func=cmd_train)


def cmd_store(args) -> int:
    from harness.store import Store

    if args.json and args.action != "stats":
        raise EvoError(f"--json goes with evo store stats, not {args.action}")
    if args.action in ("check", "repair"):
        return _store_check_or_repair(args.path, args.action == "repair")
    filters = {"kernel": args.kernel, "reason": args.reason, "genome": args.genome,
               "device": args.device}
    if args.action != "forget" and any(v is not None for v in filters.values()):
        raise EvoError(f"--kernel, --reason, --genome and --device go with evo store forget, "
                       f"not {args.action}")
    if args.action == "forget":
        return _store_forget(args.path, filters)
    if args.action == "stats" and not args.path.is_file():
        raise EvoError(f"no such measurement store: {args.path}")
    if args.action == "merge" and not args.sources:
        raise EvoError("evo store merge PATH SRC...: name at least one store to merge in")
    with Store(args.path) as store:
        for src in args.sources if args.action == "merge" else ():
            added = store.merge_from(src)
            print(f"{src}: {added['measurements']} measurements, {added['ptx_index']} PTX links added")
        rows = store.summary()
    if args.json:
        return json_output.emit(json_output.store_stats_doc(args.path, rows))
    print_table(("device", "kernel", "measurements", "valid"), rows)
    return exit_codes.OK


def _store_forget(path: Path, filters: dict) -> int:
    from evo.learn.observe import genome_text
    from genomes.genome import parse_inline
    from harness.store import Store

    if not path.is_file():
        raise EvoError(f"no such measurement store: {path}")
    if filters["genome"] is not None:  # the text the store links genomes under
        filters["genome"] = genome_text(parse_inline(filters["genome"]))
    with Store(path) as store:
        gone = store.forget(**filters)
    said = ", ".join(f"{k} {v!r}" for k, v in filters.items() if v is not None)
    print(f"{path}: forgot {gone['measurements']} results ({gone['ptx_links']} PTX links, "
          f"{gone['genome_links']} genome links) matching {said}")
    return exit_codes.OK


def _store_check_or_repair(path: Path, repair: bool) -> int:
    from harness.store_repair import check_or_repair

    code, lines = check_or_repair(path, repair)
    print("\n".join(lines))
    return exit_codes.OK if code == 0 else exit_codes.FAILURE


def cmd_priors(args) -> int:
    """build: a knowledge base from stores (or priors files) -> FILE; show: what one holds."""
    from evo.learn import priors as priors_mod
    from evo.learn.source import kb_from_paths

    exclude = _names(args.exclude)
    if args.action == "build":
        if not args.output:
            raise EvoError("evo priors build STORE... -o FILE: name the file to write")
        left_out: list[str] = []
        kb = kb_from_paths(args.paths, exclude, args.device, left_out=left_out)
        priors_mod.save_kb(kb, args.output)
        import collections

        per_device = collections.Counter(e["device"] for e in kb["kernels"])
        for device, count in sorted(per_device.items()):
            print(f"{device}: {count} kernels")
        print(f"wrote {args.output} ({len(kb['kernels'])} kernels"
              f"{', without ' + ', '.join(sorted(exclude)) if exclude else ''})")
        if left_out:  # a priors entry needs the kernel's features: its spec, or a run's
            more = f" and {len(left_out) - 5} more" if len(left_out) > 5 else ""
            print(f"left out {len(left_out)} kernel(s) of the stores that are not in evo's suite "
                  "and whose features no run kept beside the store (features.json): "
                  f"{', '.join(left_out[:5])}{more}", file=sys.stderr)
        return exit_codes.OK
    kb = kb_from_paths(args.paths, exclude, None)
    if not args.kernel:
        print_table(("device", "kernel", "results", "best genome"),
                     [(e["device"], e["kernel"], e["n"], e["best"][0][0] if e["best"] else "-")
                      for e in kb["kernels"]])
        return exit_codes.OK
    from evo.learn.source import kernel_prior
    from harness.kernels.suite import find_kernel

    spec = find_kernel(args.kernel)
    device = args.device or (kb["kernels"][0]["device"] if kb["kernels"] else "static")
    prior = kernel_prior(kb, spec, device, exclude)
    print(f"prior for {spec.name} on {device} (its own results and {len(exclude)} excluded "
          f"kernels left out)")
    print("nearest: " + ", ".join(f"{k} ({w:.2f})" for k, _, w in prior["neighbors"][:5]))
    print_table(("gene", "expected log-speedup", "evidence"),
                 [(k, f"{v:+.3f}", f"{prior['evidence'][k]:.2f}")
                  for k, v in sorted(prior["genes"].items(), key=lambda kv: -kv[1])])
    print("seeds: " + "; ".join(prior["seeds"]))
    return exit_codes.OK


def cmd_train(args) -> int:
    """evo train policy SOURCE... -o FILE: a gene policy from what stores (or priors
    files) measured: cloned from greedy, improved by GRPO (evo.learn.policy_train)."""
    from evo.learn import policy, policy_train
    from evo.learn.source import kb_from_paths

    if not args.output:
        raise EvoError("evo train policy SOURCE... -o FILE: name the file to write")
    exclude = _names(args.exclude)
    kb = kb_from_paths(args.paths, exclude, args.device, rows=0)  # every step greedy took
    landscapes = policy_train.landscapes_from_kb(kb, exclude)
    print(f"learning from {len(landscapes)} (device, kernel) landscapes"
          f"{', without ' + ', '.join(sorted(exclude)) if exclude else ''}")
    data = policy_train.train(landscapes, hidden=args.hidden, iterations=args.iterations,
                              group=args.group, seed=args.seed, log=print,
                              **_given(validation=args.validation))
    data["trained"]["exclude"] = sorted(exclude)
    data["trained"]["sources"] = [Path(p).name for p in args.paths]
    policy.save(data, args.output)
    print(policy_train.summary(data))
    print(f"wrote {args.output} (evo run --strategy policy, [policy] file = \"{args.output}\")")
    return exit_codes.OK


def _given(**options) -> dict:
    """The options given on the command line (None: the function's own default)."""
    return {k: v for k, v in options.items() if v is not None}


def _names(text: str) -> set[str]:
    """The kernels of a comma-separated --exclude."""
    return {k.strip() for k in text.split(",") if k.strip()}
