"""The exit statuses of ``evo``: the one place they are defined.

``evo.cli.main`` maps errors to them (``for_error``), the commands return them, and
``evo --help`` and the README show ``TABLE``. A usage error means evo refused the input
before doing any work, so the same command cannot succeed until it is changed; a runtime
failure means the input was fine but the work failed, or its answer was a failure.
"""

from __future__ import annotations

import sqlite3

from genomes.errors import EvoError, RuntimeFailure

OK = 0
FAILURE = 1  # runtime failure
USAGE = 2  # usage error (argparse's own status for a bad command line, kept)
INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C

TABLE = (
    (OK, "success"),
    (FAILURE, "runtime failure: ptxas rejected the PTX, the variant failed its check, a "
              "kernel's baseline failed in a run (the others still ran), no GPU or tool, a "
              "file that cannot be read or written, a damaged store"),
    (USAGE, "usage error: bad command line or flag value, bad config key, unknown kernel, "
            "genome or transform, a missing or malformed input file"),
    (INTERRUPTED, "interrupted (Ctrl-C or SIGTERM); `evo run --resume` continues a run"),
)


def epilog() -> str:
    """The exit-status table for ``evo --help``."""
    import textwrap

    rows = (textwrap.fill(what, 88, initial_indent=f"  {code:<5}", subsequent_indent=" " * 7)
            for code, what in TABLE)
    return "exit status:\n" + "\n".join(rows)


def for_error(err: BaseException) -> int:
    """The status for an error that reached ``evo.cli.main``."""
    if isinstance(err, KeyboardInterrupt):
        return INTERRUPTED
    if isinstance(err, (RuntimeFailure, OSError, sqlite3.DatabaseError)):
        return FAILURE
    if isinstance(err, EvoError):
        return USAGE
    return FAILURE
