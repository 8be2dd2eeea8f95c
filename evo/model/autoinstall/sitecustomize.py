"""Put a run's evolved kernels into any Python program started with this folder first on
``PYTHONPATH`` and ``EVO_INSTALL=CAPTURE_DIR::RUN_DIR`` set (``evo install --model DIR
--run RUN`` prints both): the program's next run launches them, unchanged.

Python imports the first ``sitecustomize`` on its path at start-up: this one installs
(``evo.install``, which hooks Inductor's launcher and finds each kernel when it first
runs), then runs the ``sitecustomize`` it shadows, if any. A failure is said on stderr and
the program runs its own kernels.
"""

import os
import sys


def _install(value: str) -> None:
    import evo
    from evo.model import install_cmd

    model, sep, run = value.partition(install_cmd.SEPARATOR)
    if not sep:
        raise ValueError(f"EVO_INSTALL={value!r}: expected CAPTURE_DIR{install_cmd.SEPARATOR}RUN_DIR")
    install_cmd.started_with = evo.install(model=model, run=run)


def _run_shadowed() -> None:
    """The sitecustomize this one hides (a distribution's), run as Python would have."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if os.environ.get("EVO_INSTALL"):
    try:
        _install(os.environ["EVO_INSTALL"])
    except Exception as err:  # noqa: BLE001 (never stop the user's program)
        print(f"evo: EVO_INSTALL: the program runs its own kernels: {type(err).__name__}: {err}",
              file=sys.stderr)
_run_shadowed()
