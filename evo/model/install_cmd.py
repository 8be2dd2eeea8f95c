"""``evo install --model DIR --run RUN [-- python app.py ARGS]``: a program launches a run's
evolved kernels, with no line of it changed.

With a program, it runs here (as ``evo capture`` and ``evo verify`` run it) with the
kernels installed, and says per kernel what ran. Without, it says what was planned (what
``evo.install`` will put in, and why not for the rest) and how to make the program's next
runs launch them: the environment (``EVO_INSTALL`` and ``PYTHONPATH``: the folder of
``autoinstall/sitecustomize.py``, which Python runs at start-up in every process, the
workers of ``torchrun`` among them), or two lines at the program's top.
"""

from __future__ import annotations

import sys
from pathlib import Path

AUTOINSTALL = Path(__file__).resolve().parent / "autoinstall"  # holds sitecustomize.py
SEPARATOR = "::"  # between the capture folder and the run folder in EVO_INSTALL
started_with = None  # the Installed the start-up hook put in this process, if it did


def without_start_up_install() -> None:
    """Take out what EVO_INSTALL put in at start-up (an ``export`` left in the shell that
    runs evo capture, verify or install): those commands put in, or leave out, kernels of
    their own, and must not run under a second hook."""
    global started_with
    if started_with is not None:
        started_with.remove()
        started_with = None


def environment(model, run) -> dict[str, str]:
    """The variables that make a Python program install the run's kernels at start-up:
    the hook's folder first on ``PYTHONPATH``, then evo's own where it runs from a source
    folder (an installed evo is on every path of its environment already)."""
    import os

    folders = [str(AUTOINSTALL)]
    root = Path(__file__).resolve().parents[2]  # the folder holding the evo package
    if root.name not in ("site-packages", "dist-packages"):
        folders.append(str(root))
    path = os.environ.get("PYTHONPATH", "")
    return {"EVO_INSTALL": f"{Path(model).resolve()}{SEPARATOR}{Path(run).resolve()}",
            "PYTHONPATH": os.pathsep.join(folders + ([path] if path else []))}


def cmd_install(args) -> int:
    """``evo install``: the program's status where one is given, else 0; 1 where nothing
    of the run would be installed."""
    import shlex

    from evo.model.install import Installed
    from evo.model.install_plan import plan
    from evo.model.program import need_torch, program_argv, run_program

    if args.program:
        program_argv(args.program)  # a bad command line fails before anything runs
    choices = plan(args.model, args.run)
    chosen = [c for c in choices if c.cubin is not None]
    if not args.program:
        for c in choices:
            print(f"  {c.name}: " + (f"evolved code  [{c.genome}]" if c.cubin else
                                     f"its own code ({c.reason})"))
        if not chosen:
            print("evo install: nothing of the run to install", file=sys.stderr)
            return 1
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in environment(args.model, args.run).items())
        print(f"{len(chosen)} kernel(s) to install. Run the program unchanged with\n"
              f"  {env} python app.py ARGS\n"
              f"or add at its top: import evo; evo.install(model={str(args.model)!r}, "
              f"run={str(args.run)!r})")
        return 0
    need_torch("evo install")
    if not chosen:
        print("evo install: nothing of the run to install; the program runs its own kernels",
              file=sys.stderr)
    with Installed(choices) as installed:
        status = run_program(args.program)
        print("evo install: " + installed.describe().replace("\n", "\nevo install: "),
              file=sys.stderr)
    return status
