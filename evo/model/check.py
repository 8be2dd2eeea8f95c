"""Evolved kernels checked inside the user's program, on its own data: ``evo verify --model
DIR --run RUN -- python app.py ARGS``.

The gate checked each variant on random inputs drawn over the ranges the capture saw; this
checks it where it will run. The program runs as ``evo capture`` runs it
(``evo.model.program``) with the run's best kernels installed (``evo.model.install.plan``
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

CHECKS = 3  # launches of each installed kernel checked against the program's own code


class ProgramCheck:
    """While active, installed kernels run evolved code, their first launches checked."""

    def __init__(self, choices, specs: dict, checks: int = CHECKS):
        from evo.model.install import Installed

        self.finder = Installed(choices)  # finds launchers; its own wrapper is never entered
        self.specs = specs  # Inductor kernel name -> KernelSpec (tolerances)
        self.checks = checks
        self.entries: dict[int, tuple | None] = {}  # id(launcher) -> finder entry or None
        # Inductor kernel name -> one verdict per checked launch (a name with two codes,
        # a forward and a backward graph's, shares one list and one spec's tolerance)
        self.results: dict[str, list[dict]] = {}
        self._class = self._original = None

    def __enter__(self):
        from torch._inductor.runtime import triton_heuristics

        self._class = triton_heuristics.CachingAutotuner
        self._original = original = self._class.run
        check = self

        def run(autotuner, *args, stream, **kwargs):
            entry = check._entry(autotuner, args)
            if entry is None or len(check.results.get(entry[4], ())) >= check.checks:
                result = original(autotuner, *args, stream=stream, **kwargs)
                if len(autotuner.launchers) == 1 and id(autotuner.launchers[0]) not in check.entries:
                    check._entry(autotuner, args)  # tuned now: swapped from the next launch
                return result
            return check._twice(original, entry, autotuner, args, stream, kwargs)

        self._class.run = run
        return self

    def __exit__(self, *exc):
        self._class.run = self._original
        for holder, key, old, _, _ in filter(None, self.entries.values()):
            _set(holder, key, old)
        return False

    def _entry(self, autotuner, args):
        """The finder's (holder, key, old, new, name) for this launcher, looked at once
        (and the evolved code put in); None for a kernel not installed."""
        if len(autotuner.launchers) != 1:
            return None
        launcher = autotuner.launchers[0]
        if id(launcher) not in self.entries:
            try:
                entry = self.finder._prepare(autotuner, launcher, args)
            except Exception as err:  # that kernel keeps its own code
                self.finder.refused[autotuner.fn.__name__] = f"{type(err).__name__}: {err}"
                entry = None
            self.entries[id(launcher)] = entry
            if entry is not None:
                _set(entry[0], entry[1], entry[3])
        return self.entries[id(launcher)]

    def _twice(self, original, entry, autotuner, args, stream, kwargs):
        """The launch with the program's code, then with the evolved code on the same
        inputs; the verdict recorded; the evolved code's result kept."""
        from evo.model.capture import passed, role_of

        holder, key, old, new, name = entry
        written = {n: v for n, v in passed(autotuner, args).items()
                   if hasattr(v, "clone") and role_of(n) in ("out", "inout")}
        before = {n: t.clone() for n, t in written.items()}
        _set(holder, key, old)
        original(autotuner, *args, stream=stream, **kwargs)
        want = {n: t.clone() for n, t in written.items()}
        for n, t in written.items():
            t.copy_(before[n])
        _set(holder, key, new)
        result = original(autotuner, *args, stream=stream, **kwargs)
        self.results.setdefault(name, []).append(self._compare(name, want, written))
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


def _set(holder, key: str, value) -> None:
    from evo.model.install import _set as set_function

    set_function(holder, key, value)


def verify_program(command: list[str], capture_dir, run_dir, checks: int = CHECKS) -> dict:
    """Run the program with the run's best kernels checked in (module docstring); returns
    {"status", "kernels": {name: summary}, "not_installed": {name: why}}."""
    from evo.model.capture import read
    from evo.model.install import plan
    from evo.model.program import need_torch, program_argv, run_program

    program_argv(command)  # a bad command line fails before torch is imported
    choices = plan(capture_dir, run_dir)
    need_torch("evo verify")
    manifest = read(capture_dir)
    specs = {k["source"]["kernel"]: k["kernel_spec"] for k in manifest["kernels"]}
    chosen = [c for c in choices if c.cubin is not None]
    not_installed = {c.name: c.reason for c in choices if c.cubin is None}
    if not chosen:
        return {"status": None, "kernels": {}, "not_installed": not_installed}
    with ProgramCheck(choices, specs, checks) as check:
        status = run_program(command)
    kernels = {}
    for c in chosen:
        runs = check.results.get(c.kernel, [])
        kernels[c.name] = {
            "genome": c.genome, "checked": len(runs),
            "agree": all(r["agree"] for r in runs) if runs else None,
            "bitwise": all(r["bitwise"] for r in runs) if runs else None,
            "max_abs_err": max((r["max_abs_err"] for r in runs), default=0.0),
            "worst": next((r["worst"] for r in runs if not r["agree"]), ""),
            "refused": check.finder.refused.get(c.kernel, "")}
    return {"status": status, "kernels": kernels, "not_installed": not_installed}


def cmd_verify(args) -> int:
    """``evo verify``: 0 when every installed kernel was launched and agreed, 1 when one
    differed or none could be checked, else the program's own failing status."""
    check_args(args)
    verdict = verify_program(args.program, args.model, args.run, args.checks)
    print(f"evo verify: {args.run}'s best kernels in the program, checked against its own "
          f"on its own data (first {args.checks} launches of each)")
    differ = unchecked = 0
    for name, k in verdict["kernels"].items():
        if k["refused"]:
            unchecked += 1
            print(f"  {name}: NOT installed: {k['refused']}")
        elif not k["checked"]:
            unchecked += 1
            print(f"  {name}: not launched with its captured sizes: not checked")
        elif k["agree"]:
            how = "bitwise equal" if k["bitwise"] else f"agree (max abs error {k['max_abs_err']:.3g})"
            print(f"  {name}: {how} on {k['checked']} launch(es)  [{k['genome']}]")
        else:
            differ += 1
            print(f"  {name}: DIFFERS on the program's data: {k['worst']}  [{k['genome']}]")
    for name, why in verdict["not_installed"].items():
        print(f"  {name}: not installed: {why}")
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
    return 0


def check_args(args) -> None:
    """Usage errors of ``evo verify`` before the program runs."""
    from pathlib import Path

    if not Path(args.run, "checkpoint.json").is_file():
        raise EvoError(f"{args.run} is not a run folder (no checkpoint.json): the --run of "
                       f"evo run --model {args.model}")
