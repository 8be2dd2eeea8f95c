"""SASS of a cubin: disassembly, a hash that identifies the machine code, opcode counts.

Different PTX often assembles to the same SASS (a renamed register, a moved
comment, a transform ptxas undoes), and the GPU only ever runs the SASS, so
the measurement store keys on a hash of it: identical code is measured once.

The hash comes from ``cuobjdump -sass`` when cuobjdump (and the nvdisasm it
calls) can be found, with addresses, encodings and headers removed. Without
cuobjdump it falls back to hashing the cubin's ``.text.*`` sections: the raw
machine code, still blind to ELF metadata that differs between identical
programs. The two methods give different hashes for the same code, so every
hash travels with its method ("sass" or "cubin") and the two must not be mixed.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import logging
import re
import struct
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

from harness import tool_cache
from harness.toolchain import MissingToolError, cuobjdump_env, find_cuobjdump

log = logging.getLogger(__name__)

# "        /*0040*/   @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;   /* 0x... */"
_ADDRESS_RE = re.compile(r"/\*([0-9a-fA-F]{4,})\*/")
_ENCODING_RE = re.compile(r"/\*\s*0x[0-9a-fA-F]+\s*\*/")
_INSTRUCTION_RE = re.compile(
    r"^(?P<pred>@!?U?P[T0-9]+\s+)?(?P<op>[A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)"
    r"(?:\s+(?P<args>[^;]*?))?\s*;$"  # cuobjdump ends every instruction with ";"
)
_FUNCTION_RE = re.compile(r"^\s*Function\s*:\s*(\S+)")
# Header lines that name files, flags or fatbin metadata, not code.
_HEADER_PREFIXES = (
    ".headerflags", "Fatbin", "====", "arch =", "code version", "host =",
    "compile_size", "identifier", "producer", ".elftype", "..........",
)
_WIDTH_BY_TYPE = {"U8": 8, "S8": 8, "U16": 16, "S16": 16}


@functools.cache
def _warn_unavailable(reason: str) -> None:
    """Log once per distinct reason: it would otherwise repeat for every variant."""
    log.warning("SASS disassembly unavailable, hashing cubin .text instead: %s", reason)


def disassemble(cubin: bytes, timeout: float = 60) -> str | None:
    """``cuobjdump -sass`` of ``cubin``, or None if cuobjdump is missing or fails.

    None is not an error: callers fall back to :func:`cubin_text_hash`, and the
    reason is logged once so that the run's log says which method was used.
    """
    try:
        cuobjdump, env = find_cuobjdump(), cuobjdump_env()
    except MissingToolError as exc:
        _warn_unavailable(str(exc))
        return None
    question = tool_cache.key(cuobjdump, ("-sass", env.get("NVDISASM_PATH", "")), cubin)
    kept = tool_cache.lookup(question)  # harness.tool_cache: asked before, by anyone here
    if kept is not None and kept[0] == 0:
        return kept[1]
    with tempfile.TemporaryDirectory(prefix="evo-sass-") as tmp:
        path = Path(tmp, "kernel.cubin")
        path.write_bytes(cubin)
        try:
            proc = subprocess.run(
                [str(cuobjdump), "-sass", str(path)], env=env,
                capture_output=True, text=True, timeout=timeout, check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            _warn_unavailable(f"cuobjdump failed: {exc}")
            return None
    if proc.returncode != 0 or not proc.stdout.strip():
        detail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        _warn_unavailable(f"cuobjdump exited {proc.returncode}: {detail[-1] if detail else ''}")
        return None
    tool_cache.keep(question, 0, proc.stdout)
    return proc.stdout


def _clean_line(line: str) -> str:
    """One disassembly line without address, encoding and runs of spaces."""
    line = _ENCODING_RE.sub("", _ADDRESS_RE.sub("", line))
    return " ".join(line.split())


def normalize_sass(text: str) -> str:
    """Only the code of a ``cuobjdump -sass`` listing, one instruction per line.

    Drops addresses (``/*0040*/``), encodings (``/* 0x... */``, including the
    second encoding line of 128-bit instructions), blank and comment-only
    lines, and headers (file names, ELF flags, fatbin metadata), so that two
    identical programs compare equal. Keeps ``code for sm_XX`` and
    ``Function : name`` lines, and branch targets (function-relative offsets,
    which change only when the code does).
    """
    out = []
    for raw in text.splitlines():
        line = _clean_line(raw)
        if not line or line.startswith(_HEADER_PREFIXES):
            continue
        if line.startswith(("/*", "//")):
            continue
        if line.startswith(".target"):
            continue  # repeats the "code for sm_XX" line
        out.append(line)
    return "\n".join(out) + "\n"


def _elf_sections(cubin: bytes) -> list[tuple[str, int, int, bytes]]:
    """(name, type, link, contents) of every section of a 64-bit little-endian ELF."""
    if cubin[:4] != b"\x7fELF" or len(cubin) < 64 or cubin[4] != 2 or cubin[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF cubin")
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [
        struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize)
        for i in range(shnum)
    ]
    strtab_off, strtab_size = headers[shstrndx][4], headers[shstrndx][5]
    strtab = cubin[strtab_off:strtab_off + strtab_size]
    sections = []
    for sh_name, sh_type, _flags, _addr, offset, size, link, *_ in headers:
        name = strtab[sh_name:strtab.index(b"\0", sh_name)].decode("ascii", "replace")
        data = b"" if sh_type == 8 else cubin[offset:offset + size]  # 8: NOBITS
        sections.append((name, sh_type, link, data))
    return sections


def _elf_text_sections(cubin: bytes) -> list[tuple[str, bytes]]:
    """(name, contents) of the ``.text.*`` sections of a 64-bit little-endian ELF."""
    return sorted((name, data) for name, _, _, data in _elf_sections(cubin)
                  if name.startswith(".text."))


_DATA_SECTIONS = (".nv.global.init", ".nv.constant3", ".nv.constant4")
"""Module data the code reads: initialized ``.global`` variables, ``.const`` tables, and
the bank of module-variable addresses (its relocations name the variables)."""


def _relocations(sections, index: int) -> list[bytes]:
    """The relocations of section ``index``'s RELA/REL section, each as the offset, type,
    addend and the NAME of the symbol it points at (symbol indices differ between
    programs)."""
    names = [name for name, *_ in sections]
    out = []
    for name, sh_type, link, data in sections:
        if sh_type not in (4, 9) or name not in (".rela" + names[index], ".rel" + names[index]):
            continue  # 4: RELA (24-byte entries), 9: REL (16)
        _, _, strlink, symtab = sections[link]
        strtab = sections[strlink][3]
        size = 24 if sh_type == 4 else 16
        for at in range(0, len(data) - size + 1, size):
            offset, info = struct.unpack_from("<QQ", data, at)
            addend = struct.unpack_from("<q", data, at + 16)[0] if size == 24 else 0
            st_name = struct.unpack_from("<I", symtab, (info >> 32) * 24)[0]
            symbol = strtab[st_name:strtab.index(b"\0", st_name)]
            out.append(struct.pack("<QIq", offset, info & 0xFFFFFFFF, addend) + symbol)
    return out


def cubin_text_hash(cubin: bytes, functions: Iterable[str] | None = None,
                    exclude: Iterable[str] = ()) -> str:
    """sha256 over the machine code of a cubin's functions: each ``.text.<function>``
    section (name, size, bytes) and the relocations in it (which symbol each address
    refers to), plus the module's initialized data (``.global`` tables, ``.const``).

    ``functions``: only these (None: all); ``exclude``: all but these (a cubin holding a
    variant and its clock64 twin is keyed without the twin, but with every ``.func`` the
    variant can call: two variants differing only in a helper are two codes).

    Other sections (symbol tables, ``.nv.info`` attributes, notes) are left out: they can
    differ between programs whose code is identical. Relocations and data come in only
    where the code has them, so the key of self-contained code is the text alone.
    """
    digest = hashlib.sha256()
    wanted = None if functions is None else {f".text.{f}" for f in functions}
    unwanted = {f".text.{f}" for f in exclude}
    sections = _elf_sections(cubin)
    texts = sorted((name, i) for i, (name, *_) in enumerate(sections)
                   if name.startswith(".text.") and name not in unwanted
                   and (wanted is None or name in wanted))
    for name, i in texts:
        data = sections[i][3]
        digest.update(name.encode() + b"\0" + struct.pack("<Q", len(data)) + data)
        for relocation in _relocations(sections, i):
            digest.update(b"R" + relocation + b"\0")
    for i, (name, _, _, data) in enumerate(sections):
        if name in _DATA_SECTIONS and data:
            digest.update(name.encode() + b"\0" + struct.pack("<Q", len(data)) + data)
            for relocation in _relocations(sections, i):
                digest.update(b"R" + relocation + b"\0")
    return digest.hexdigest()


def sass_hash(cubin: bytes) -> tuple[str, str]:
    """(sha256 hex, method): method "sass" from normalised disassembly, else "cubin"."""
    text = disassemble(cubin)
    if text is not None:
        return hashlib.sha256(normalize_sass(text).encode()).hexdigest(), "sass"
    return cubin_text_hash(cubin), "cubin"


def _instructions(sass_text: str) -> list[tuple[str, str]]:
    """(opcode, operands) of every real instruction, predicates dropped.

    ptxas pads each function after its final ``EXIT`` with a ``BRA`` to itself
    and ``NOP``s up to an alignment boundary; that padding never executes, so
    it is left out here (it stays in the hash, where it is harmless).
    """
    found = []
    per_function: list[tuple[str, str]] = []

    def flush() -> None:
        while per_function and per_function[-1][0] == "NOP":
            per_function.pop()
        if per_function and per_function[-1][0] == "<trap>":
            per_function.pop()
        found.extend(per_function)
        per_function.clear()

    for raw in sass_text.splitlines():
        if _FUNCTION_RE.match(raw):
            flush()
            continue
        address = _ADDRESS_RE.search(raw)
        line = _clean_line(raw)
        m = _INSTRUCTION_RE.match(line)
        if not line or not m or line.startswith((".", "/*", "//")):
            continue
        op, args = m.group("op"), (m.group("args") or "").strip()
        # The self-branch after EXIT: "/*00d0*/ BRA 0xd0;". Normalised text has no
        # addresses; there, sm_70+ instructions being 16 bytes gives the address.
        here = int(address.group(1), 16) if address else 16 * len(per_function)
        if op == "BRA" and args.lower() == hex(here):
            op = "<trap>"
        per_function.append((op, args))
    flush()
    return found


def opcode_histogram(sass_text: str, fine: bool = False) -> collections.Counter:
    """Count instructions by opcode: coarse ``LDG`` by default, ``LDG.E.128`` if ``fine``.

    Works on raw or normalised ``cuobjdump -sass`` text.
    """
    counts: collections.Counter = collections.Counter()
    for op, _ in _instructions(sass_text):
        counts[op if fine else op.split(".", 1)[0]] += 1
    return counts


def _access_width(op: str) -> int:
    """Bits moved by a load/store opcode: ``LDG.E.128`` -> 128, ``LDG.E.U8`` -> 8, else 32."""
    width = 32
    for modifier in op.split(".")[1:]:
        if modifier.isdigit() and int(modifier) in (64, 128, 256):
            width = int(modifier)
        elif modifier in _WIDTH_BY_TYPE:
            width = _WIDTH_BY_TYPE[modifier]
    return width


def sass_stats(cubin: bytes) -> dict:
    """Static figures of a cubin's SASS, JSON-safe, for the static backend and reports.

    Keys: ``available`` (False, with ``reason``, when it cannot be disassembled),
    ``instructions`` (padding excluded), ``opcodes`` (coarse histogram),
    ``global_loads`` / ``global_stores`` (counts by width in bits, as string
    keys), ``local_loads`` / ``local_stores`` (LDL/STL: spill traffic),
    ``shared_loads`` / ``shared_stores``.
    """
    text = disassemble(cubin)
    if text is None:
        return {"available": False, "reason": "cuobjdump/nvdisasm not available or failed"}
    instructions = _instructions(text)
    coarse = collections.Counter(op.split(".", 1)[0] for op, _ in instructions)
    global_loads: collections.Counter = collections.Counter()
    global_stores: collections.Counter = collections.Counter()
    for op, _ in instructions:
        base = op.split(".", 1)[0]
        if base == "LDG":
            global_loads[str(_access_width(op))] += 1
        elif base == "STG":
            global_stores[str(_access_width(op))] += 1
    return {
        "available": True,
        "instructions": len(instructions),
        "opcodes": dict(coarse.most_common()),
        "global_loads": dict(sorted(global_loads.items(), key=lambda kv: int(kv[0]))),
        "global_stores": dict(sorted(global_stores.items(), key=lambda kv: int(kv[0]))),
        "local_loads": coarse["LDL"],
        "local_stores": coarse["STL"],
        "shared_loads": coarse["LDS"],
        "shared_stores": coarse["STS"],
    }


_SASS_ROW_RE = re.compile(r"/\*([0-9a-fA-F]{4,})\*/\s+([^;/][^;]*?)\s*;")
_BRANCH_RE = re.compile(r"\bBRA(?:\.\S+)?\s+(?:[^,]+,\s*)?0x([0-9a-fA-F]+)\b")


def hot_region(sass_text: str, limit: int = 48) -> dict:
    """The SASS an LLM prompt shows beside the PTX: the innermost loop (the shortest span
    of a backward branch), else the whole kernel, at most ``limit`` instructions, padding
    after the last EXIT left out. ``{"region": what it is, "text": "/*addr*/ instr" lines}``."""
    rows = [(int(a, 16), ins.strip()) for a, ins in _SASS_ROW_RE.findall(sass_text)]
    last_exit = max((i for i, (_, ins) in enumerate(rows) if ins.split()[-1] == "EXIT"
                     or ins.startswith("EXIT")), default=len(rows) - 1)
    rows = rows[:last_exit + 1]
    loops = []
    for here, ins in rows:
        m = _BRANCH_RE.search(ins)
        if m and int(m.group(1), 16) < here:
            loops.append((here - int(m.group(1), 16), int(m.group(1), 16), here))
    if loops:
        _, start, end = min(loops)
        body = [(a, ins) for a, ins in rows if start <= a <= end]
        region = f"the innermost loop ({start:#06x}-{end:#06x}, {len(body)} instructions)"
    else:
        body, region = rows, f"the whole kernel ({len(rows)} instructions, no loop)"
    if len(body) > limit:
        region += f"; its first {limit} shown"
        body = body[:limit]
    return {"region": region, "text": "\n".join(f"/*{a:04x}*/ {ins}" for a, ins in body)}
