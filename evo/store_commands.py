"""``evo store`` and ``evo priors``: what runs leave behind, the measurement stores and the
knowledge built from them (``cmd_<name>(args) -> int``, as ``evo.commands``)."""

from __future__ import annotations

from pathlib import Path

from genomes.errors import EvoError

from evo import exit_codes, json_output
from evo.commands import print_table


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

    exclude = {k.strip() for k in args.exclude.split(",") if k.strip()}
    if args.action == "build":
        if not args.output:
            raise EvoError("evo priors build STORE... -o FILE: name the file to write")
        kb = kb_from_paths(args.paths, exclude, args.device)
        priors_mod.save_kb(kb, args.output)
        import collections

        per_device = collections.Counter(e["device"] for e in kb["kernels"])
        for device, count in sorted(per_device.items()):
            print(f"{device}: {count} kernels")
        print(f"wrote {args.output} ({len(kb['kernels'])} kernels"
              f"{', without ' + ', '.join(sorted(exclude)) if exclude else ''})")
        return exit_codes.OK
    kb = kb_from_paths(args.paths, exclude, None)
    if not args.kernel:
        print_table(("device", "kernel", "results", "best genome"),
                     [(e["device"], e["kernel"], e["n"], e["best"][0][0] if e["best"] else "-")
                      for e in kb["kernels"]])
        return exit_codes.OK
    from evo.learn.source import kernel_prior
    from harness.suite import find_kernel

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
    exclude = {k.strip() for k in args.exclude.split(",") if k.strip()}
    kb = kb_from_paths(args.paths, exclude, args.device)
    landscapes = policy_train.landscapes_from_kb(kb, exclude)
    print(f"learning from {len(landscapes)} (device, kernel) landscapes"
          f"{', without ' + ', '.join(sorted(exclude)) if exclude else ''}")
    data = policy_train.train(landscapes, hidden=args.hidden, iterations=args.iterations,
                              group=args.group, seed=args.seed, log=print)
    data["trained"]["exclude"] = sorted(exclude)
    policy.save(data, args.output)
    print(policy_train.summary(data))
    print(f"wrote {args.output} (evo run --strategy policy, [policy] file = \"{args.output}\")")
    return exit_codes.OK
