"""The model path's commands (evo capture, evo verify, evo install): their command lines,
made by ``evo.cli`` through ``add_parsers``; each runs from its own module."""

from __future__ import annotations

import argparse
from pathlib import Path

from evo.model import check as model_check
from evo.model import program as model_program


def add_parsers(command) -> None:
    """``command(name, help)`` makes a subcommand's parser (evo.cli's)."""
    p = command("capture", "run a torch.compile'd program (evo capture --out DIR -- python "
                           "app.py ARGS) and write its Triton kernels as specs, with their "
                           "share of its GPU time, into a capture folder for evo run --model")
    p.add_argument("-o", "--out", type=Path, required=True, metavar="DIR",
                   help="the capture folder to write (manifest.json, kernels/)")
    p.add_argument("--timed", type=int, default=model_program.TIMED, metavar="N",
                   help="launches timed per kernel and argument shapes; the rest count at "
                        f"their mean (default {model_program.TIMED})")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="-- python app.py [ARGS]",
                   help="the program, as you run it (python app.py ..., python -m pkg ...)")
    p.set_defaults(func=_capture)

    p = command("verify", "run the program with a run's best kernels installed, each "
                          "checked against the program's own kernel on the program's own "
                          "data (evo verify --model DIR --run RUN -- python app.py ARGS)")
    _model_and_run(p)
    p.add_argument("--checks", type=int, default=model_check.CHECKS, metavar="N",
                   help="launches of each installed kernel run both ways and compared "
                        f"(default {model_check.CHECKS})")
    p.add_argument("--timed", type=int, default=model_check.TIMED, metavar="N",
                   help="launches of each installed kernel after those, timed with each code "
                        "in turn: the GPU time it saves in the program (default "
                        f"{model_check.TIMED}; 0: none)")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="-- python app.py [ARGS]",
                   help="the program, as you run it")
    p.set_defaults(func=_verify)

    p = command("install", "run the program with a run's best kernels installed (evo install "
                           "--model DIR --run RUN -- python app.py ARGS), or, without a "
                           "program, say what would be installed and how to make the "
                           "program's next runs launch it, unchanged")
    _model_and_run(p)
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="-- python app.py [ARGS]",
                   help="the program, as you run it (none: print the plan and the environment)")
    p.set_defaults(func=_install)


def _model_and_run(p) -> None:
    """The capture folder and the run folder, as verify and install name them."""
    p.add_argument("--model", type=Path, required=True, metavar="DIR",
                   help="the capture folder (evo capture --out DIR)")
    p.add_argument("--run", type=Path, required=True, metavar="RUN",
                   help="the run that evolved it (evo run --model DIR --out RUN)")


def _capture(args) -> int:
    from evo.model.install_cmd import without_start_up_install
    from evo.model.program import cmd_capture

    without_start_up_install()
    return cmd_capture(args)


def _verify(args) -> int:
    from evo.model.check import cmd_verify
    from evo.model.install_cmd import without_start_up_install

    without_start_up_install()
    return cmd_verify(args)


def _install(args) -> int:
    from evo.model.install_cmd import cmd_install, without_start_up_install

    without_start_up_install()
    return cmd_install(args)
