"""The kernels a run covers (``[run] suite``, ``--kernel``, ``--model``): suite names, glob
patterns over the suite, spec or PTX paths, globs over paths, and capture folders.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import sys
from pathlib import Path

from genomes.errors import EvoError
from harness.kernels.spec import KernelSpec
from harness.kernels.suite import find_kernel, list_kernels


def anchored(patterns: list[str]) -> list[str]:
    """``patterns`` with every one that names a file or folder (a path, a glob over paths,
    a capture folder) made absolute, suite names and suite globs as they are: a run's
    config.toml then finds its kernels again from any directory (``evo export``, ``evo
    run --resume``), as ``resolve_suite`` reads them."""
    out = []
    for pattern in patterns:
        path = os.path.expanduser(pattern)
        if "/" in pattern or pattern.endswith((".toml", ".ptx")) or os.path.exists(path):
            out.append(os.path.abspath(path))
        else:
            out.append(pattern)
    return out


def _as_typed(pattern: str) -> str:
    """A pattern ``anchored`` made absolute, relative again where it lies under the
    current directory: an error quotes it as the user typed it."""
    if os.path.isabs(pattern) and pattern.startswith(os.getcwd() + os.sep):
        return os.path.relpath(pattern)
    return pattern


def resolve_suite(patterns: list[str]) -> list[KernelSpec]:
    """Kernels named by suite names, glob patterns over the suite, spec/PTX paths, glob
    patterns over paths (``mydir/*.toml``: those with a ``/`` or a .toml/.ptx suffix), or
    capture folders (``evo.capture``'s: their kernels, the largest share of the step first)."""
    from evo import checkpoint
    from evo.model import capture

    suite = list_kernels()
    chosen: list[KernelSpec] = []
    for pattern in patterns:
        is_glob = any(ch in pattern for ch in "*?[")
        folder = Path(os.path.expanduser(pattern))
        if (folder / capture.MANIFEST).is_file():  # a capture: its kernels, largest share first
            matches = _installable(folder, capture.read(folder))
        elif folder.is_dir():
            run = (folder / checkpoint.FILE).is_file()
            raise EvoError(f"{_as_typed(pattern)} is {'a run folder' if run else 'a folder'}, "
                           f"not a capture (no {capture.MANIFEST}): a model's kernels come from "
                           "`evo capture -o DIR -- python app.py`; kernels one by one are "
                           "named (suite names) or given as .toml/.ptx files")
        elif is_glob and ("/" in pattern or pattern.endswith((".toml", ".ptx"))):
            files = sorted(f for f in glob.glob(os.path.expanduser(pattern))
                           if f.endswith((".toml", ".ptx")) and os.path.isfile(f))
            if not files:
                raise EvoError(f"path pattern {_as_typed(pattern)!r} matches no .toml or .ptx file")
            matches = [find_kernel(Path(f)) for f in files]
        elif is_glob:
            matches = [k for k in suite if fnmatch.fnmatch(k.name, pattern)]
            if not matches:
                raise EvoError(f"suite pattern {pattern!r} matches no kernel (see `evo kernels`)")
        else:
            matches = [find_kernel(pattern)]
        for m in matches:
            same = next((c for c in chosen if c.name == m.name), None)
            if same is None:
                chosen.append(m)
            elif same.spec_path != m.spec_path:  # two kernels, one name: one would be lost
                raise EvoError(f"two kernels are named {m.name!r} ({same.spec_path} and "
                               f"{m.spec_path}); give one another name")
    if not chosen:
        raise EvoError("the suite is empty: name kernels in [run] suite or with --kernel")
    return chosen


def _installable(folder: Path, manifest: dict) -> list[KernelSpec]:
    """A capture's kernels, one entry for each code compiled for dynamic shapes: one
    launcher runs it at every size, so it is evolved once, at the size with the largest
    share, and its best checked at every other captured size before ``evo.install`` puts
    it back (``install.plan``). One captured size is too little to trust a code that runs
    at any: such a kernel is left out. Said on stderr; none left is an error."""
    from evo.model.capture import same_code

    kernels = manifest["kernels"]
    if not kernels:
        skipped = manifest.get("skipped", [])
        why = "; ".join(f"{s['kernel']}: {s['reason']}" for s in skipped[:3])
        raise EvoError(f"{folder}: the capture holds no kernel evo can evolve"
                       + (f" ({len(skipped)} skipped: {why}{'; ...' if len(skipped) > 3 else ''})"
                          if skipped else ""))
    groups = same_code(kernels)
    single = [k["name"] for k in kernels if len(groups.get(k["name"], ())) == 1]
    for names in sorted({tuple(n) for n in groups.values() if len(n) > 1}):
        print(f"evo: {folder}: {names[0]}'s code runs at {len(names)} captured sizes from one "
              "launcher: evolved once, its best checked at each before it is installed",
              file=sys.stderr)
    if single:
        print(f"evo: {folder}: {len(single)} kernel(s) left out, compiled for dynamic shapes "
              "and captured at one size (their code runs at any size: a check at one is too "
              "little; capture a run at two sizes, or torch.compile(dynamic=False) compiles "
              "each size apart): " + ", ".join(single), file=sys.stderr)
    kept = [k for k in kernels if k["name"] not in single
            and groups.get(k["name"], [k["name"]])[0] == k["name"]]
    if kernels and not kept:
        raise EvoError(f"{folder}: every captured kernel is compiled for dynamic shapes and "
                       "was captured at one size: none would be installed; capture the "
                       "program at two sizes, or with torch.compile(dynamic=False)")
    return [k["kernel_spec"] for k in kept]
