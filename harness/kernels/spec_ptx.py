"""Kernel specs and PTX signatures: read an entry's parameters from PTX, check a spec
against them, write a spec skeleton for a new kernel (``evo init-kernel``), and say
ptxas's line numbers in the user's file where evo assembled a narrowed copy of it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.kernels.spec import DTYPE_BITS, BufferParam, KernelSpec, SpecError, _suggest

_PTX_SCALAR_DTYPES = {"u32": "u32", "s32": "i32", "b32": "u32", "f32": "f32", "f64": "f64", "s64": "i64",
                      "u64": "u64", "b64": "u64", "u8": "u8", "b8": "u8", "s8": "i8", "f16": "f16",
                      "b16": "f16"}
_PTX_WIDTH = re.compile(r"\.[bsuf](8|16|32|64)")


@dataclass(frozen=True)
class PtxParam:
    """One `.param` of a PTX entry signature: its name, type suffix ("u64") and size in bits."""

    name: str
    ptx_type: str
    bits: int


def ptx_entries(ptx_text: str) -> dict[str, list[PtxParam]]:
    """Every `.entry` in PTX text with its parameter list, in order (a small regex, no parser).

    Accepts nvcc's `.param .u64 foo_param_0` as well as Triton's
    `.param .u64 .ptr .global .align 1 foo_param_0` and arrays `.param .align 8 .b8 p[16]`.
    """
    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", ptx_text, flags=re.S)
    entries = {}
    for match in re.finditer(r"\.entry\s+([\w$%]+)\s*(?:\(([^)]*)\))?", text):
        params = []
        for piece in filter(str.strip, (match.group(2) or "").split(",")):
            tokens = piece.split()
            name, _, length = tokens[-1].partition("[")
            types = [t for t in tokens[1:-1] if _PTX_WIDTH.fullmatch(t)]
            ptx_type = types[0][1:] if types else "b8"
            bits = int(ptx_type[1:]) * (int(length.rstrip("]")) if length else 1)
            params.append(PtxParam(name, ptx_type, bits))
        entries[match.group(1)] = params
    return entries


def choose_entry(entries: dict, entry: str | None, flag: str = "entry=") -> str:
    """``entry`` if the PTX has it, or, given none, the PTX's only entry; else a SpecError
    naming the entries and how to choose one (``flag``)."""
    if entry is None:
        if len(entries) != 1:
            raise SpecError(f"the PTX has {len(entries)} entries "
                            f"({', '.join(entries) or 'none'}): name one with {flag}")
        return next(iter(entries))
    if entry not in entries:
        raise SpecError(f"entry {entry!r} is not in the PTX{_suggest(entry, entries)}")
    return entry


def check_ptx(spec: KernelSpec, ptx_text: str | None = None) -> None:
    """Check that the spec's entry is in its PTX and its params match the signature's sizes.

    A spec whose params disagree with the PTX would launch with garbage arguments; this
    turns that into one SpecError before anything runs.
    """
    where = spec.spec_path or spec.name
    entries = ptx_entries(ptx_text if ptx_text is not None else spec.ptx_text())
    if spec.entry not in entries:
        raise SpecError(f"{where}: entry {spec.entry!r} is not in {spec.ptx_path.name}"
                        f"{_suggest(spec.entry, entries)} (entries: {', '.join(entries) or 'none'})")
    signature = entries[spec.entry]
    if len(signature) != len(spec.params):
        takes = ", ".join(f"{p.name} .{p.ptx_type}" for p in signature) or "none"
        raise SpecError(f"{where}: spec lists {len(spec.params)} params but PTX entry {spec.entry!r} "
                        f"takes {len(signature)} ({takes}); `evo init-kernel {spec.ptx_path} -o "
                        f"new.toml` writes a skeleton with the PTX's params")
    for param, ptx in zip(spec.params, signature):
        bits = 64 if isinstance(param, BufferParam) else DTYPE_BITS[param.dtype]
        if bits != ptx.bits:
            raise SpecError(f"{where}: param {param.name!r} ({param.kind} {param.dtype}, {bits} bits) does not "
                            f"match PTX param {ptx.name} (.{ptx.ptx_type}, {ptx.bits} bits)")
    dynamic = uses_dynamic_shared(ptx_text if ptx_text is not None else spec.ptx_text(), spec.entry)
    if dynamic and spec.shared_mem == 0:
        raise SpecError(f"{where}: entry {spec.entry!r} uses dynamic shared memory (.extern .shared "
                        f"{dynamic}[]) but the spec gives shared_mem = 0, so it would write past "
                        "its block's shared memory: set shared_mem to the bytes it needs (for a "
                        "Triton kernel, the compiled kernel's metadata.shared)")


_EXTERN_SHARED_RE = re.compile(r"\.extern\s+\.shared\b[^;]*?\b([A-Za-z_$%][\w$]*)\s*\[\s*\]")


def uses_dynamic_shared(ptx_text: str, entry: str) -> str | None:
    """The name of the ``.extern .shared`` array that ``entry``'s body uses, if any: such a
    kernel needs the launch's dynamic shared memory (the spec's ``shared_mem``)."""
    names = _EXTERN_SHARED_RE.findall(ptx_text)
    if not names:
        return None
    start = re.search(rf"\.entry\s+{re.escape(entry)}\s*\(", ptx_text)
    if start is None:
        return None
    nxt = re.search(r"\.entry\s", ptx_text[start.end():])
    body = ptx_text[start.end():start.end() + nxt.start()] if nxt else ptx_text[start.end():]
    return next((n for n in names if re.search(rf"(?<![\w$]){re.escape(n)}(?![\w$])", body)), None)


# A global access's type -> the buffer dtype it proves; untyped bits say only the width.
_ACCESS_DTYPES = {"f32": "f32", "f64": "f64", "f16": "f16", "s32": "i32", "u32": "u32",
                  "s64": "i64", "u64": "u64", "s8": "i8", "u8": "u8", "bf16": "bf16"}
# nvcc moves __half and __nv_bfloat16 data with .u16 loads and stores (evo has no 16-bit
# integer dtype): 16-bit accesses of any suffix say the width only.
_BITS_GUESS = {"b8": ("u8", "u8 or i8"), "b16": ("f16", "f16 or bf16"),
               "u16": ("f16", "f16 or bf16"), "s16": ("f16", "f16 or bf16"),
               "b32": ("f32", "f32, i32 or u32"), "b64": ("f64", "f64, i64 or u64")}


@dataclass(frozen=True)
class PointerUse:
    """What an entry's body proves about one pointer param: ``dtype`` (None: never
    accessed through it, or accessed as untyped bits: ``guess`` then says the width's
    candidates), ``role`` (in, out, inout; None: not accessed), and the accesses seen."""

    dtype: str | None
    role: str | None
    accesses: tuple[str, ...]
    guess: str = ""


def pointer_uses(ptx_text: str, entry: str) -> dict[str, PointerUse]:
    """Each pointer param's dtype and role from the entry's global loads, stores and atomics
    (their type suffix; the params each address may derive from, ``PointerInfo``). An
    access whose address may come from several params counts for each."""
    from genomes.memory import PointerInfo
    from genomes.ptx import parse

    fn = next((f for f in parse(ptx_text).entries if f.name == entry), None)
    if fn is None:
        return {}
    info = PointerInfo(fn)
    seen: dict[str, list[tuple[str, str]]] = {}  # param -> (load/store, type)
    for ins in fn.instructions():
        if ins.op not in ("ld", "st", "atom", "red") or "global" not in ins.mods:
            continue
        addr = ins.address()
        if addr is None or not addr.base.startswith("%"):
            continue
        kind = {"ld": "load", "st": "store"}.get(ins.op, "load+store")
        types = [m for m in ins.mods if m in _ACCESS_DTYPES or m in _BITS_GUESS]
        for param in info.provenance(addr.base) - {"*"}:
            seen.setdefault(param, []).append((kind, types[-1] if types else ""))
    out = {}
    for param, uses in seen.items():
        kinds = {k for k, _ in uses}
        loads, stores = any("load" in k for k in kinds), any("store" in k for k in kinds)
        role = "inout" if loads and stores else "out" if stores else "in"
        typed = [_ACCESS_DTYPES[t] for _, t in uses if t in _ACCESS_DTYPES]
        bits = [t for _, t in uses if t in _BITS_GUESS]
        accesses = tuple(sorted({f"{k} .{t}" for k, t in uses if t}))
        if typed:  # the narrowest typed access (a vector of u8 is still u8 data)
            dtype = min(typed, key=lambda d: (DTYPE_BITS[d], typed.count(d) * -1))
            out[param] = PointerUse(dtype, role, accesses)
        elif bits:
            out[param] = PointerUse(None, role, accesses, _BITS_GUESS[bits[0]][1])
        else:
            out[param] = PointerUse(None, role, accesses)
    return out


def params_read(ptx_text: str, entry: str) -> frozenset[str]:
    """The entry's params its code loads (``ld.param``): a param declared and never read
    does not reach the kernel's work (Triton keeps the sizes Inductor compiled in as
    params it does not read)."""
    from genomes.ptx import parse

    fn = next((f for f in parse(ptx_text).entries if f.name == entry), None)
    if fn is None:
        return frozenset()
    read = set()
    for ins in fn.instructions():
        if ins.op == "ld" and "param" in ins.mods:
            addr = ins.address()
            if addr is not None:
                read.add(addr.base)
    return frozenset(read)


def spec_skeleton(ptx_text: str, entry: str | None = None, ptx_name: str | None = None) -> str:
    """A TOML spec skeleton for one PTX entry, with "TODO" where only the user knows.

    64-bit params (.u64 / .b64) become buffers, but for the size the index guard bounds
    by (an int64 n), the rest scalars of the matching dtype (value TODO). A buffer's dtype
    and role come from the body's global accesses where they prove them
    (``pointer_uses``), each line saying which; its count stays TODO. load_spec rejects
    any remaining "TODO" by name. With one entry in the PTX, `entry` may be omitted;
    `ptx_name` defaults to "<entry>.ptx". A param wider than 8 bytes (a struct passed by
    value) is a SpecError: a spec's params are pointers and scalars.
    """
    entries = ptx_entries(ptx_text)
    entry = choose_entry(entries, entry, "--entry")
    wide = next((p for p in entries[entry] if p.bits > 64), None)
    if wide is not None:
        name = wide.name.removeprefix(entry + "_")
        raise SpecError(f"{entry}: param {name} is {wide.bits // 8} bytes (a struct passed by "
                        "value, such as a __grid_constant__ one); evo's specs take pointers "
                        "and scalars of up to 8 bytes: pass its fields as separate parameters")
    from harness.kernels.ptx_index import index_guard

    try:
        uses = pointer_uses(ptx_text, entry)
        guard = index_guard(ptx_text, entry)
    except Exception:  # PTX the parser cannot read: the skeleton says so, param by param
        uses, guard = {}, None
    lines = [f'# Spec skeleton for PTX entry {entry}: replace every "TODO", then check the rest.',
             f'name = "{entry}"', f'entry = "{entry}"', f'ptx = "{ptx_name or entry + ".ptx"}"']
    if guard is not None:  # one thread per element, the index bounded by a size param
        size = guard.size.removeprefix(entry + "_")
        lines += [f"grid = [{GUARDED_COUNT // GUARDED_BLOCK}, 1, 1]".ljust(32)
                  + f"# ceil({size} / block): one thread per element below {size}",
                  f"block = [{GUARDED_BLOCK}, 1, 1]".ljust(32) + "# threads per block, at most 1024",
                  "shared_mem = 0                  # dynamic shared memory, bytes",
                  'timing = "events"               # many blocks']
    elif _reads_its_index(ptx_text, entry):  # launched wide, in a shape the PTX does not say
        lines += ['grid = "TODO"                   # blocks [x, y, z]: the kernel reads its block '
                  "and thread indices",
                  'block = "TODO"                  # threads per block [x, y, z], at most 1024',
                  "shared_mem = 0                  # dynamic shared memory, bytes",
                  'timing = "events"               # "clock64" only for a launch of one block']
    else:
        lines += ["grid = [1, 1, 1]                # blocks (x, y, z)",
                  "block = [1, 1, 1]               # threads per block (x, y, z), at most 1024",
                  "shared_mem = 0                  # dynamic shared memory, bytes",
                  'timing = "clock64"              # "clock64" for single-block kernels, "events" for many-block']
    lines += ['description = ""', "", "[tolerance]", "rtol = 1e-05", "atol = 1e-05"]
    for i, ptx in enumerate(entries[entry]):
        name = ptx.name.removeprefix(entry + "_")
        lines += ["", "[[params]]", f'name = "{name if name.isidentifier() else f"p{i}"}"']
        bound = guard is not None and guard.size == ptx.name
        if ptx.bits == 64 and ptx.ptx_type in ("u64", "b64") and not bound:
            lines += ['kind = "buffer"'] + _buffer_lines(uses.get(ptx.name), guard, ptx.name,
                                                         size if guard is not None else "")
        else:
            dtype = _PTX_SCALAR_DTYPES.get(ptx.ptx_type, "TODO")
            why = f"from .{ptx.ptx_type}" + (
                ": evo has no 16-bit integer dtype; widen the parameter to int"
                if ptx.ptx_type in ("u16", "s16") else "")
            lines += ['kind = "scalar"', f'dtype = "{dtype}"                   # {why}']
            if bound:
                lines.append(f"value = {GUARDED_COUNT}".ljust(32) + "# the size the index guard "
                             "bounds by (evo's choice: change it with the counts and the grid)")
            else:
                lines.append('value = "TODO"')
    return "\n".join(lines) + "\n"


def _reads_its_index(ptx_text: str, entry: str) -> bool:
    """Whether ``entry``'s code reads a thread or block index (``%tid``, ``%ctaid``):
    a kernel of many threads, whose launch a skeleton of one thread would hide (the gate
    compares it with its baseline at the same launch: one element each, both right)."""
    from genomes.ptx import only_entry

    try:
        body = only_entry(ptx_text, entry)
    except Exception:  # PTX the parser cannot read: ask rather than guess one thread
        return True
    return re.search(r"%(tid|ctaid)\.[xyz]\b", body) is not None


GUARDED_COUNT = 1 << 20  # elements of a skeleton whose index guard names its size param
GUARDED_BLOCK = 256


def _buffer_lines(use: PointerUse | None, guard=None, param: str = "",
                  size: str = "") -> list[str]:
    """A buffer's dtype, count, role and fill lines, inferred where the PTX proves them
    (``guard``: the entry's ``IndexGuard``, which may give the count; ``size``: its size
    param's name in the skeleton)."""
    seen = f"from {', '.join(use.accesses)}" if use and use.accesses else ""
    if use and use.dtype:
        dtype, why = use.dtype, f"inferred {seen}"
    elif use and use.guess:
        dtype, why = "TODO", f"{use.guess}? ({seen})"
    else:
        dtype, why = "TODO", ("not accessed as global memory here: f32 f64 f16 bf16 i32 u32 ..., "
                              'or a 64-bit scalar (kind = "scalar", dtype i64 or u64)')
    lines = [f'dtype = "{dtype}"'.ljust(32) + f"# {why}"]
    if guard is not None and param in guard.indexed:
        lines.append(f"count = {GUARDED_COUNT}".ljust(32)
                     + f"# indexed by the thread index, which the guard bounds by {size}")
    else:
        lines.append('count = "TODO"                  # element count')
    if use and use.role == "out" and guard is not None and not guard.whole:
        lines.append('role = "inout"'.ljust(32) + "# only written, but not every element: the "
                     "guard is not i < n (judged whole)")
    elif use and use.role:
        lines.append(f'role = "{use.role}"'.ljust(32) + f"# inferred: {_ROLE_WHY[use.role]}")
    else:
        lines.append('role = "TODO"                   # in | out | inout')
    if dtype in ("u8", "i8"):  # the whole range of a byte is valid data
        low, high = (0, 256) if dtype == "u8" else (-128, 128)
        lines += ['fill = "int"', f"low = {low}", f"high = {high}".ljust(32) + "# exclusive"]
    elif dtype in ("i32", "u32", "i64", "u64"):
        lines += ['fill = "int"'.ljust(32) + "# integers: the range the kernel expects",
                  "low = 0", 'high = "TODO"                   # exclusive (indices: the table size)']
    else:
        lines.append('fill = "normal"                 # normal | uniform | int | const')
    return lines


_ROLE_WHY = {"in": "only read", "out": "only written", "inout": "read and written"}


def file_lines(spec: KernelSpec) -> dict[int, int]:
    """Line numbers of the spec's baseline text (``baseline_ptx``) -> its PTX file's, where
    the baseline is narrowed from a file of several entries (empty where the text is the
    file's own). Lines are matched in order, whitespace aside; a line found nowhere after
    the last match is left out."""
    from genomes.ptx import only_entry
    from harness.kernels.spec import read_ptx

    if spec.ptx_path is None:
        return {}
    original = read_ptx(spec.ptx_path)
    narrowed = only_entry(original, spec.entry)
    if narrowed == original:
        return {}
    source = [" ".join(line.split()) for line in original.splitlines()]
    mapping, at = {}, 0
    for number, line in enumerate(narrowed.splitlines(), 1):
        key = " ".join(line.split())
        if not key:
            continue
        found = next((k for k in range(at, len(source)) if source[k] == key), None)
        if found is not None:
            mapping[number], at = found + 1, found + 1
    return mapping


def in_file_lines(spec: KernelSpec, message: str) -> str:
    """``message`` (ptxas on the spec's baseline) with each "line N" also given as the line
    of the user's PTX file, where evo assembled a narrowed copy (ptxas counts that copy's)."""
    mapping = file_lines(spec)
    if not mapping:
        return message
    name = spec.ptx_path.name

    def where(m: re.Match) -> str:
        line = mapping.get(int(m.group(1)))
        return m.group(0) if line is None else f"{m.group(0)} ({name} line {line})"
    return re.sub(r"\bline (\d+)", where, message)
