"""Evolved kernels checked inside the user's program, on its own data: ``evo verify --model
DIR --run RUN -- python app.py ARGS``.

The gate checked each variant on random inputs drawn over the ranges the capture saw; this
checks it where it will run. The program runs as ``evo capture`` runs it
(``evo.model.program``) with the run's best kernels installed (``evo.model.install_plan.plan``
chooses them, ``Installed`` finds each launcher and its CUfunction). The first ``checks``
launches of every installed kernel run twice, on the same arguments: the program's own
code, then, with the tensors it writes put back as they were, the evolved code; the
written tensors must agree within the kernel's tolerance (the spec's, the same as the
gate's: exact for integers, bf16's rounding allowed for bf16). The program goes on with
the evolved kernel's results. Launches after the checked ones run the evolved code alone.
"""

from __future__ import annotations

import sys

from genomes.errors import EvoError

from evo.model.hook import LaunchHook, LaunchTimer, elapsed_us

CHECKS = 3  # launches of each installed kernel checked against the program's own code
TIMED = 10  # launches of each installed kernel timed per code after its checked ones
MIN_TIMED = 3  # fewer launches of each code give no ratio: one launch is not a median


def _sizes(autotuner, args) -> tuple:
    """A launch's sizes: the values of its arguments that are not tensors."""
    from evo.model.capture import passed

    return tuple((n, v) for n, v in passed(autotuner, args).items() if not hasattr(v, "data_ptr"))


class ProgramCheck(LaunchHook):
    """While active, installed kernels run evolved code, their first launches checked."""

    def __init__(self, choices, specs: dict, checks: int = CHECKS, timed: int = TIMED):
        from evo.model.install import Installed

        super().__init__()
        self.finder = Installed(choices)  # finds launchers; never hooked itself
        self.names = {kernel for kernel, _ in self.finder.choices}
        self.specs = specs  # Inductor kernel name -> KernelSpec (tolerances)
        self.checks, self.timed = checks, timed
        self.launched: dict[str, int] = {}  # kernel name -> launches with an installed code
        self.timer = LaunchTimer()
        # kernel name -> sizes -> {"own": [(start, end)], "evolved": [...]}: launches after
        # the checked ones, the two codes in turn at each size (one launcher of a code
        # compiled for dynamic shapes runs every size: a program alternating two sizes
        # would otherwise time one code at each)
        self.timings: dict[str, dict[tuple, dict[str, list]]] = {}
        # Inductor kernel name -> one verdict per checked launch (a name with two codes,
        # a forward and a backward graph's, shares one list and one spec's tolerance)
        self.results: dict[str, list[dict]] = {}
        self.graphed: set[str] = set()  # kernel names a CUDA graph recorded with evolved code

    def launch(self, autotuner, args, stream, run):
        import torch

        capturing = torch.cuda.is_current_stream_capturing()
        if len(autotuner.launchers) != 1 and autotuner.fn.__name__ in self.names:
            return self._first(autotuner, args, run, capturing)
        entry = self._entry(autotuner, args)
        if entry is None:
            return run()
        self._count(entry)
        if capturing:  # the graph records the evolved code; its replays run it
            self.graphed.add(entry.name)
            return run()
        if len(self.results.get(entry.name, ())) < self.checks:
            return self._twice(run, entry, autotuner, args)
        return self._timed(run, entry, stream, _sizes(autotuner, args))

    def _first(self, autotuner, args, run, capturing):
        """A kernel's first launch compiles and tunes, with the program's own code, and
        only then is its launcher known: what the launch writes is kept before it, and
        the evolved code checked against its result after (not while a graph is captured)."""
        before = None if capturing else {n: t.clone() for n, t in self._written(autotuner, args).items()}
        result = run()
        entry = self._entry(autotuner, args)  # the evolved code is in from here
        if entry is None:
            return result
        self._count(entry)
        if before is None or len(self.results.get(entry.name, ())) >= self.checks:
            return result
        return self._twice(run, entry, autotuner, args, before)

    def _count(self, entry) -> None:
        self.launched[entry.name] = self.launched.get(entry.name, 0) + 1

    def _timed(self, run, entry, stream, sizes: tuple = ()):
        """One launch timed with the program's own code or the evolved code, in turn at
        each of its ``sizes``, up to ``timed`` each; the evolved code stays in for the
        launches after."""
        times = self.timings.setdefault(entry.name, {}).setdefault(sizes, {"own": [], "evolved": []})
        code = "own" if len(times["own"]) <= len(times["evolved"]) else "evolved"
        if len(times[code]) >= self.timed:
            return run()
        entry.put(evolved=code == "evolved")
        result, events = self.timer.time(stream, run)
        entry.put(evolved=True)
        if events is not None:
            times[code].append(events)
        return result

    def times_us(self) -> dict[str, dict]:
        """Per kernel name: µs of a launch of each code in the program (at each size the
        median of its launches, sizes weighted by the launches timed at each), and the
        launches timed of each code."""
        import statistics

        out = {}
        for name, per_size in self.timings.items():
            own = evolved = timed = 0
            for times in per_size.values():
                n = min(len(times["own"]), len(times["evolved"]))
                if n:
                    own += n * elapsed_us(times["own"][:n], statistics.median)
                    evolved += n * elapsed_us(times["evolved"][:n], statistics.median)
                    timed += n
            if timed:
                out[name] = {"own_us": own / timed, "evolved_us": evolved / timed, "timed": timed}
        return out

    def __exit__(self, *exc):
        self.unhook()
        self.finder.disable()  # every kernel found runs its own code again
        return False

    def _entry(self, autotuner, args):
        """The finder's Swap for this launcher, the evolved code put in the first time it
        is seen; None for a kernel not installed."""
        fresh = len(autotuner.launchers) == 1 and id(autotuner.launchers[0]) not in self.finder.looked
        entry = self.finder.entry_for(autotuner, args)
        if fresh and entry is not None:
            entry.put(evolved=True)
        return entry

    def _written(self, autotuner, args) -> dict:
        """The tensors a launch writes, by argument name: so named by Inductor, or (an
        output the code adds into, ``capture.code_roles``) so judged by the kernel's spec."""
        from evo.model.capture import passed, role_of

        spec = self.specs.get(autotuner.fn.__name__)
        judged = {p.name for p in spec.buffers() if p.role in ("out", "inout")} if spec else set()
        return {n: v for n, v in passed(autotuner, args).items()
                if hasattr(v, "clone") and (role_of(n) in ("out", "inout") or n in judged)}

    def _twice(self, run, entry, autotuner, args, before=None):
        """The launch with the program's code, then with the evolved code on the same
        inputs; the verdict recorded; the evolved code's result kept. ``before``: the
        program's code has run already, on written tensors that held these."""
        written = self._written(autotuner, args)
        if before is None:
            before = {n: t.clone() for n, t in written.items()}
            entry.put(evolved=False)
            run()
        want = {n: t.clone() for n, t in written.items()}
        for n, t in written.items():
            t.copy_(before[n])
        entry.put(evolved=True)
        result = run()
        self.results.setdefault(entry.name, []).append(self._compare(entry.name, want, written))
        return result

    def _compare(self, name: str, want: dict, got: dict) -> dict:
        """One checked launch: per written tensor, bitwise equal or within tolerance."""
        import torch

        spec = self.specs.get(name)
        params = {p.name: p for p in spec.buffers()} if spec is not None else {}
        verdict = {"agree": True, "bitwise": True, "max_abs_err": 0.0, "worst": ""}
        for n, a in want.items():
            b = got[n]
            if torch.equal(a, b):
                continue
            verdict["bitwise"] = False
            if not a.is_floating_point():
                verdict.update(agree=False, worst=f"{n}: integers differ")
                continue
            tol = spec.tolerance_for(params[n]) if n in params else None
            rtol, atol = (tol.rtol, tol.atol) if tol is not None else (1e-5, 1e-5)
            close = torch.isclose(b.float(), a.float(), rtol=rtol, atol=atol, equal_nan=True)
            err = float((b.float() - a.float()).abs().nan_to_num(float("inf")).max())
            if err > verdict["max_abs_err"]:
                verdict.update(max_abs_err=err, worst=n)
            if not bool(close.all()):
                bad = int((~close).sum())
                verdict.update(agree=False, worst=f"{n}: {bad} of {close.numel()} elements "
                                                  f"outside rtol {rtol:g} / atol {atol:g}")
        return verdict


def verify_program(command: list[str], capture_dir, run_dir, checks: int = CHECKS,
                   timed: int = TIMED) -> dict:
    """Run the program with the run's best kernels checked in and timed (module
    docstring); returns {"status", "kernels": {name: summary}, "not_installed": {name:
    why}, "triton_gpu_us": the capture's}."""
    from evo.model.capture import read
    from evo.model.install_plan import plan
    from evo.model.program import need_torch, program_argv, run_program

    program_argv(command)  # a bad command line fails before torch is imported
    choices = plan(capture_dir, run_dir, verified=False)  # every best, checked anew
    need_torch("evo verify")
    manifest = read(capture_dir)
    specs = {k["source"]["kernel"]: k["kernel_spec"] for k in manifest["kernels"]}
    chosen = [c for c in choices if c.cubin is not None]
    not_installed = {c.name: c.reason for c in choices if c.cubin is None}
    if not chosen:
        return {"status": None, "kernels": {}, "not_installed": not_installed}
    with ProgramCheck(choices, specs, checks, timed) as check:
        status = run_program(command)
    kernels = kernel_verdicts(check, chosen)
    keep_verdicts(run_dir, command, kernels)
    return {"status": status, "kernels": kernels, "not_installed": not_installed,
            "triton_gpu_us": manifest.get("triton_gpu_us")}


def kernel_verdicts(check: ProgramCheck, chosen) -> dict:
    """What a finished ``ProgramCheck`` found of each installed choice: {name: its
    in-program times, launches, checks and why it was not seen}."""
    times = check.times_us()
    kernels = {}
    for c in chosen:
        runs = check.results.get(c.kernel, [])
        kernels[c.name] = times.get(c.kernel, {}) | {
            "launched": check.launched.get(c.kernel, 0),
            "genome": c.genome, "checked": len(runs),
            "agree": all(r["agree"] for r in runs) if runs else None,
            "bitwise": all(r["bitwise"] for r in runs) if runs else None,
            "max_abs_err": max((r["max_abs_err"] for r in runs), default=0.0),
            "worst": next((r["worst"] for r in runs if not r["agree"]), ""),
            "refused": check.finder.refused.get(c.kernel, ""),
            "graphed": c.kernel in check.graphed,
            "not_found": check.finder.not_found(c.kernel)}
    return kernels


def keep_verdicts(run_dir, command: list[str], kernels: dict) -> None:
    """The verdicts in the run folder (``install.VERIFIED``), so that ``evo.install``
    leaves out a kernel that differed or ran slower in the program."""
    import json
    from pathlib import Path

    from evo.model.install_plan import VERIFIED
    from evo.rundir import write_atomic

    keep = ("genome", "agree", "checked", "worst", "own_us", "evolved_us", "timed", "launched")
    write_atomic(Path(run_dir) / VERIFIED, json.dumps({"program": " ".join(command), "kernels": {
        name: {key: k.get(key) for key in keep} for name, k in kernels.items()}}, indent=1) + "\n")


def cmd_verify(args) -> int:
    """``evo verify``: 0 when every installed kernel was launched and agreed, 1 when one
    differed or none could be checked, else the program's own failing status."""
    from evo.model.install_plan import SLOWER

    check_args(args)
    verdict = verify_program(args.program, args.model, args.run, args.checks, args.timed)
    print(f"evo verify: {args.run}'s best kernels in the program, checked against its own "
          f"on its own data (first {args.checks} launches of each)")
    differ = unchecked = 0
    saved = own = 0.0  # µs over this run: saved by the evolved codes, taken by their own
    for name, k in verdict["kernels"].items():
        if k["refused"]:
            unchecked += 1
            print(f"  {name}: NOT installed: {k['refused']}")
        elif not k["checked"]:
            unchecked += 1
            print(f"  {name}: not checked: {k['not_found']}")
        elif k["agree"]:
            how = "bitwise equal" if k["bitwise"] else f"agree (max abs error {k['max_abs_err']:.3g})"
            print(f"  {name}: {how} on {k['checked']} launch(es)  [{k['genome']}]")
            if k.get("timed", 0) >= MIN_TIMED:
                saved += (k["own_us"] - k["evolved_us"]) * k["launched"]
                own += k["own_us"] * k["launched"]
                slower = k["evolved_us"] > SLOWER * k["own_us"]
                print(f"    in the program: {k['own_us']:.2f} us -> {k['evolved_us']:.2f} us a "
                      f"launch ({k['own_us'] / k['evolved_us']:.3f}x; medians of {k['timed']} "
                      f"launches of each code, in turn), {k['launched']} launches in this run"
                      + ("; slower here: evo.install leaves it out" if slower else ""))
            elif args.timed and k.get("graphed"):
                print("    not timed: its launches after the checked ones run inside a CUDA "
                      "graph (recorded with the evolved code), where no launch is timed alone")
            elif args.timed:
                print(f"    not timed: {k.get('timed', 0)} launch(es) of each code after the "
                      f"checked ones, {MIN_TIMED} needed (run the program for more steps)")
        else:
            differ += 1
            print(f"  {name}: DIFFERS on the program's data: {k['worst']}  [{k['genome']}]")
    for name, why in verdict["not_installed"].items():
        print(f"  {name}: not installed: {why}")
    if any(k.get("timed", 0) >= MIN_TIMED for k in verdict["kernels"].values()):
        print(f"GPU time the evolved kernels saved over this run: {saved:.1f} us of the "
              f"{own:.1f} us their own codes take ({100 * saved / max(own, 1e-9):.1f} %); each kernel "
              "timed on its launches in the program (CUDA events), not the program's own "
              "step time")
    status = verdict["status"]
    if status is None:
        print("evo verify: no kernel of the run to install: nothing checked", file=sys.stderr)
        return 1
    if status:
        print(f"evo verify: the program exited with status {status}", file=sys.stderr)
        return status
    if differ or not any(k["checked"] for k in verdict["kernels"].values()):
        return 1
    if unchecked:
        print(f"evo verify: {unchecked} installed kernel(s) were not checked", file=sys.stderr)
    print(f"next: in the program, import evo; evo.install(model={str(args.model)!r}, "
          f"run={str(args.run)!r})")
    return 0


def check_args(args) -> None:
    """Usage errors of ``evo verify`` before the program runs (the folders: ``plan``)."""
    for flag in ("checks", "timed"):
        if getattr(args, flag) < 0:
            raise EvoError(f"--{flag} is a count of launches: 0 or more, got {getattr(args, flag)}")
