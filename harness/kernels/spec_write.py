"""A KernelSpec written back as a spec table or TOML file that ``load_spec`` reads to an
equal spec: for specs built in code (``evo.api``), which the run folder's config, the
finalist check's subprocess and ``--resume`` can only name by a file.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.kernels.spec import _FILL_KEYS, BufferParam, KernelSpec, Param

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
            "\r": "\\r"}


def param_table(param: Param) -> dict:
    """One param as its ``[[params]]`` table (what ``harness.kernels.spec.read_param`` reads back)."""
    if not isinstance(param, BufferParam):
        return {"name": param.name, "kind": "scalar", "dtype": param.dtype, "value": param.value}
    table = {"name": param.name, "kind": "buffer", "dtype": param.dtype, "count": param.count,
             "role": param.role}
    if param.role == "out" and param == BufferParam(param.name, param.dtype, param.count, "out"):
        return table  # never filled (poisoned before each launch): load_spec's reading of no fill
    table["fill"] = param.fill
    table.update({key: getattr(param, key) for key in _FILL_KEYS.get(param.fill, ())})
    return table


def spec_table(spec: KernelSpec, folder: Path | None = None) -> dict:
    """The spec as the table a spec file holds. ``ptx`` is relative where the file will sit
    in ``folder`` beside its PTX, else absolute (load_spec accepts both)."""
    ptx = spec.ptx_path.resolve()
    table = {"name": spec.name, "entry": spec.entry,
             "ptx": ptx.name if folder is not None and ptx.parent == Path(folder).resolve()
             else str(ptx),
             "grid": list(spec.grid), "block": list(spec.block), "shared_mem": spec.shared_mem,
             "timing": spec.timing, "caches": spec.caches, "description": spec.description}
    table.update({key: value for key, value in (("reference", spec.reference),
                                                ("peer", spec.peer)) if value is not None})
    table["tolerance"] = {"rtol": spec.tolerance.rtol, "atol": spec.tolerance.atol}
    if spec.meta:
        table["meta"] = dict(spec.meta)
    table["params"] = [param_table(p) for p in spec.params]
    return table


def spec_toml(spec: KernelSpec, folder: Path | None = None) -> str:
    """The spec as TOML text, for a file in ``folder`` (see ``spec_table``)."""
    table = spec_table(spec, folder)
    tables = {name: table.pop(name) for name in ("tolerance", "meta") if name in table}
    params = table.pop("params")
    lines = _pairs(table)  # top-level keys first: after a [table] header they would be its
    for name, sub in tables.items():
        lines += ["", f"[{name}]", *_pairs(sub)]
    for param in params:
        lines += ["", "[[params]]", *_pairs(param)]
    return "\n".join(lines) + "\n"


def file_stem(name: str) -> str:
    """A kernel name made safe as the start of a file name."""
    return re.sub(r"[^\w.-]", "_", str(name))[:64]


def spec_file(spec: KernelSpec, folder: Path) -> Path:
    """A file that holds ``spec``: its own, else the spec written into ``folder`` (a spec
    built in code or resized, for a process that reads specs from files)."""
    if spec.spec_path is not None:
        return spec.spec_path
    path = Path(folder) / f"{file_stem(spec.name)}.toml"
    path.write_text(spec_toml(spec))
    return path


def _pairs(table: dict) -> list[str]:
    return [f"{_key(k)} = {_value(v)}" for k, v in table.items()]


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _value(key)


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):  # a basic string: control characters escaped, never raw
        return '"' + "".join(_ESCAPES.get(c) or (f"\\u{ord(c):04x}" if ord(c) < 32 or ord(c) == 127
                                                  else c) for c in value) + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)  # inf and nan are TOML floats too; repr keeps every digit
    if isinstance(value, int):
        return str(value)
    raise TypeError(f"cannot write {value!r} as TOML")
