"""KERNEL arguments of the CLI (a suite name, a .toml spec or a .ptx path) resolved to
their PTX and launch, and command output files written whole."""

from __future__ import annotations

from pathlib import Path

from genomes.errors import EvoError


def write_output(path: Path, text: str) -> None:
    """Write a command's output file whole (temp file + rename: never half of it), or say in
    one line why it cannot be written."""
    from evo.rundir import write_atomic

    write_atomic(path, text)


def kernel_ptx(arg: str) -> tuple[str, str]:
    """The PTX text of KERNEL (a suite name, a .toml spec or a .ptx path) and its source."""
    path = Path(arg)
    if path.suffix == ".ptx":
        if not path.is_file():
            raise EvoError(f"no such PTX file: {arg}")
        from harness.kernels.spec import read_ptx

        return read_ptx(path), str(path)
    from harness.kernels.suite import find_kernel

    spec = find_kernel(arg)
    return spec.ptx_text(), str(spec.ptx_path)


def kernel_launch(arg: str):
    """KERNEL's launch from its spec, or None for a PTX file with no spec beside it (genes
    that change the launch are then no-ops)."""
    path = Path(arg)
    if path.suffix == ".ptx" and not path.with_suffix(".toml").is_file():
        return None
    from harness.kernels.suite import find_kernel

    return find_kernel(arg).launch


def parse(text: str, source: str):
    """PTX text parsed, errors naming ``source`` and the line."""
    from genomes import ptx

    return ptx.parse(text, source)
