"""Errors for bad input (and, as ``RuntimeFailure``, for work the machine could not do).
The CLI prints ``str(err)`` as one line and exits non-zero.

Everything that can go wrong *while evolving* (a transform that does not apply, ptxas
rejecting a variant, a wrong answer on the GPU) is a result, not one of these.
"""


class EvoError(Exception):
    """Bad input from the user: one clear line, no traceback."""


class RuntimeFailure(EvoError):
    """Not bad input: the work itself could not be done (a tool or GPU missing, a file that
    cannot be written, a damaged store). One line as well, but the CLI exits with its
    runtime-failure status rather than its usage-error one (``evo.exit_codes``)."""


class PtxParseError(EvoError):
    """PTX text that the parser cannot read; the message names the line."""

    def __init__(self, message: str, line: int | None = None, source: str = "<ptx>"):
        self.line = line
        where = f"{source}:{line}: " if line is not None else f"{source}: "
        super().__init__(where + message)


class UnknownTransformError(EvoError):
    """A gene names a transform that does not exist (message lists the known ones)."""


class GenomeFormatError(EvoError):
    """A genome (JSON file or inline list) that cannot be read."""
