"""Child processes that never run the caller's script again.

evo's child processes (the GPU worker, the arena keeper, the pools that apply genomes) are
started with multiprocessing's *spawn* method (CUDA cannot be forked). Spawn prepares a
child by importing the parent's ``__main__``: a plain script or a notebook cell that calls
``evo.measure`` without an ``if __name__ == "__main__":`` guard runs again inside every
child (a model capture, a whole evolution), and multiprocessing stops it with its
bootstrapping error. evo's children run functions of its own modules and need nothing
from ``__main__``, so ``context()`` is a spawn context whose processes start with
``__main__``'s spec and file hidden from that preparation: the child imports no script.
"""

from __future__ import annotations

import multiprocessing
import sys
import threading
from multiprocessing.context import SpawnContext, SpawnProcess

_LOCK = threading.Lock()  # one start at a time: hiding __main__'s names is process-wide


class _Process(SpawnProcess):
    def start(self) -> None:
        with _LOCK:
            main = sys.modules.get("__main__")
            hidden = {name: getattr(main, name) for name in ("__spec__", "__file__")
                      if main is not None and hasattr(main, name)}
            try:
                if "__spec__" in hidden:
                    main.__spec__ = None
                if "__file__" in hidden:
                    del main.__file__
                super().start()
            finally:
                for name, value in hidden.items():
                    setattr(main, name, value)


class _Context(SpawnContext):
    Process = _Process


def context() -> multiprocessing.context.BaseContext:
    """A spawn context whose children do not import the caller's ``__main__``."""
    return _Context()
