"""The PTX model: a module's functions and statements, and printing them back.

Printing an unchanged module gives back the input byte for byte: every statement keeps
the exact text it was read from (plus the whitespace and comments around it), and only a
statement a transform replaced is rendered from its fields. Transforms therefore edit
``Function.body`` (a list of statements) and ``Function.directives`` (the performance
directives between the parameter list and the body), and everything else stays as read.

``parse`` (its code is in ``genomes.ptx_parse``) reads text into this model. Accepted
forms include nvcc's (``ld.global.f32 \t%f4, [%rd5+4];``) and Triton's
(``@%p1 ld.global.b32 { %r1 }, [ %rd1 + 0 ];``).
"""

from __future__ import annotations

import functools
import re
import threading
from dataclasses import dataclass, field, replace


_REG_RE = re.compile(r"%[A-Za-z_$][\w$]*")
_MAXNREG_RE = re.compile(r"\.maxnreg\s+(\d+)")
_MAXNTID_RE = re.compile(r"\.maxntid\s+(\d+)")


# --------------------------------------------------------------------------- statements


@dataclass(frozen=True)
class Instruction:
    """One PTX instruction. ``text`` is the source it was read from; ``None`` once edited.

    ``opcode`` is the full dotted name (``ld.global.v4.f32``); ``operands`` are the raw
    operand strings split at top-level commas (``{%f1, %f2}`` and ``[%rd1+8]`` stay whole).
    """

    opcode: str
    operands: tuple[str, ...] = ()
    pred: str | None = None  # guard such as "@%p1" or "@!%p1"
    text: str | None = None

    # An instruction never changes (``with_`` makes a new one), so what is parsed from its
    # fields is kept on it: transforms ask each instruction's op, defs and uses hundreds
    # of times a genome (applying a random genome to gemm_tile_4x6x8: ~650 defs() calls).
    @functools.cached_property
    def op(self) -> str:
        """The base operation: ``ld`` for ``ld.global.f32``."""
        return self.opcode.split(".", 1)[0]

    @functools.cached_property
    def mods(self) -> tuple[str, ...]:
        """The dotted modifiers: ``("global", "f32")`` for ``ld.global.f32``."""
        return tuple(self.opcode.split(".")[1:])

    def with_(self, **changes) -> Instruction:
        """A copy with fields changed; it will be rendered, not copied, when printed."""
        return replace(self, text=None, **changes)

    def render(self) -> str:
        if self.text is not None:
            return self.text
        guard = f"{self.pred} " if self.pred else ""
        args = f" \t{', '.join(self.operands)}" if self.operands else ""
        return f"{guard}{self.opcode}{args};"

    # --- def/use ------------------------------------------------------------------
    def defs(self) -> tuple[str, ...]:
        """Registers this instruction writes."""
        return self._defs

    def uses(self) -> tuple[str, ...]:
        """Registers this instruction reads (the guard predicate included)."""
        return self._uses

    @functools.cached_property
    def _defs(self) -> tuple[str, ...]:
        if not self.operands or self.op in _NO_DEST_OPS:
            return ()
        first = self.operands[0]
        if self.op in _DEST_UNLESS_ADDRESS and first.startswith("["):
            return ()
        return tuple(r for part in first.split("|") for r in _REG_RE.findall(part))

    @functools.cached_property
    def _uses(self) -> tuple[str, ...]:
        regs: list[str] = []
        if self.pred:
            regs.append(self.pred.lstrip("@!"))
        # wgmma accumulates into its first operand: it reads what it writes.
        start = 0 if (self.op in _NO_DEST_OPS or self.op == "wgmma" or not self.operands
                      or not self.defs()) else 1
        for operand in self.operands[start:]:
            regs.extend(_REG_RE.findall(operand))
        return tuple(regs)

    def address(self) -> Address | None:
        """The memory operand ``[base+offset]`` of a load/store-like instruction, if any."""
        for operand in self.operands:
            if operand.startswith("["):
                return Address.parse(operand)
        return None

    @property
    def space(self) -> str | None:
        """The state space of a memory instruction (``global``, ``shared``, ...)."""
        for mod in self.mods:
            if mod in STATE_SPACES:
                return mod
        return None


# ops whose first operand is read, not written (stores, branches, barriers, ...)
_NO_DEST_OPS = frozenset(
    {"st", "red", "bra", "brx", "ret", "exit", "bar", "barrier", "membar", "fence",
     "prefetch", "prefetchu", "trap", "brkpt", "call", "cp", "stmatrix",
     "griddepcontrol", "setmaxnreg", "nanosleep", "pmevent", "applypriority", "discard",
     "tensormap"}
)
# ops that write their first operand unless it is an address: ``mbarrier.arrive %state,
# [bar]`` and ``mbarrier.try_wait %p, [bar], ...`` write, ``mbarrier.init [bar], n`` does
# not; ``multimem.ld_reduce`` writes, ``multimem.st``/``.red`` do not
_DEST_UNLESS_ADDRESS = frozenset({"mbarrier", "multimem"})
STATE_SPACES = ("global", "shared", "local", "param", "const", "generic")


@dataclass(frozen=True)
class Address:
    """A parsed memory operand: ``[%rd5+4]`` is base ``%rd5``, offset 4."""

    base: str
    offset: int = 0

    @classmethod
    def parse(cls, operand: str) -> Address | None:
        inner = operand.strip()[1:-1].replace(" ", "").replace("\t", "")
        m = re.fullmatch(r"([%$\w.]+?)(?:\+(-?(?:0[xX][0-9a-fA-F]+|\d+)))?", inner)
        if not m:
            m2 = re.fullmatch(r"([%$\w.]+?)-(\d+)", inner)
            return cls(m2.group(1), -int(m2.group(2))) if m2 else None
        return cls(m.group(1), int(m.group(2), 0) if m.group(2) else 0)

    def render(self) -> str:
        # nvcc writes negative offsets as "+-512"; ptxas rejects "[%rd1-512]".
        return f"[{self.base}+{self.offset}]" if self.offset else f"[{self.base}]"


@dataclass(frozen=True)
class Label:
    name: str
    text: str | None = None

    def render(self) -> str:
        return self.text if self.text is not None else f"{self.name}:"


@dataclass(frozen=True)
class Directive:
    """A statement starting with a dot inside a body: ``.reg .f32 %f<9>;``, ``.pragma``."""

    text: str

    @property
    def keyword(self) -> str:
        return self.text.split(None, 1)[0]

    def render(self) -> str:
        return self.text


@dataclass(frozen=True)
class Other:
    """Text kept verbatim: scope braces ``{`` ``}``, ``.loc`` lines, lone comments."""

    text: str

    def render(self) -> str:
        return self.text


Statement = Instruction | Label | Directive | Other


@dataclass(frozen=True)
class Line:
    """A statement with the whitespace/comments around it, so printing is exact."""

    stmt: Statement
    before: str = "\t"
    after: str = "\n"

    def render(self) -> str:
        return self.before + self.stmt.render() + self.after


# --------------------------------------------------------------------------- functions


@dataclass
class Param:
    name: str
    type: str  # ".u64", ".f32", ...
    is_pointer: bool  # a .u64/.b64 param, or one with .ptr: may be a buffer address


@dataclass
class Function:
    """An ``.entry`` or ``.func`` with a body.

    ``signature`` runs from the linkage keywords through the closing parenthesis of the
    parameter list; ``directives`` is the text between that and ``{`` (``.maxntid``,
    ``.maxnreg``, ...); ``body`` holds the lines between the outer braces.
    """

    name: str
    is_entry: bool
    signature: str
    directives: str
    body: list[Line]
    open_brace: str = "{"
    close_brace: str = "}"
    params: list[Param] = field(default_factory=list)

    def render(self) -> str:
        return (self.signature + self.directives + self.open_brace
                + "".join(line.render() for line in self.body) + self.close_brace)

    def rewrite(self, change) -> int:
        """Replace every instruction for which ``change(ins)`` returns another opcode or
        operands (None: keep it); the line's surrounding text stays. Returns the count."""
        count = 0
        for i, line in enumerate(self.body):
            ins = line.stmt
            if not isinstance(ins, Instruction):
                continue
            new = change(ins)
            if new is not None and (new.opcode, new.operands) != (ins.opcode, ins.operands):
                self.body[i] = Line(new, line.before, line.after)
                count += 1
        return count

    def instructions(self) -> list[Instruction]:
        return [ln.stmt for ln in self.body if isinstance(ln.stmt, Instruction)]

    @property
    def maxnreg(self) -> int | None:
        m = _MAXNREG_RE.search(self.directives)
        return int(m.group(1)) if m else None

    @property
    def maxntid(self) -> int | None:
        """The x extent of the function's ``.maxntid``: no block may have more threads."""
        m = _MAXNTID_RE.search(self.directives)
        return int(m.group(1)) if m else None


@dataclass
class Module:
    """A PTX module: raw text chunks interleaved with parsed functions."""

    parts: list[str | Function]

    def render(self) -> str:
        return "".join(p if isinstance(p, str) else p.render() for p in self.parts)

    @property
    def functions(self) -> list[Function]:
        return [p for p in self.parts if isinstance(p, Function)]

    @property
    def entries(self) -> list[Function]:
        return [f for f in self.functions if f.is_entry]

    def entry(self, name: str | None = None) -> Function:
        """The entry called ``name``, or the only/first one."""
        for f in self.entries:
            if name is None or f.name == name:
                return f
        raise KeyError(name)

    def copy(self) -> Module:
        """A copy whose functions and bodies can be edited; statements are immutable."""
        return Module([p if isinstance(p, str) else replace(p, body=list(p.body),
                                                              params=list(p.params))
                       for p in self.parts])

    @property
    def target(self) -> str | None:
        for p in self.parts:
            if isinstance(p, str):
                m = re.search(r"^\s*\.target\s+(\w+)", p, re.M)
                if m:
                    return m.group(1)
        return None


# --------------------------------------------------------------------------- reading


_ENTRY_DECL_RE = re.compile(r"^[ \t]*(?:\.(?:visible|weak|extern)\s+)*\.entry\s", re.M)


def only_entry(text: str, entry: str) -> str:
    """The PTX with every kernel entry but ``entry`` removed (``.func``s and globals stay).

    A module from ``nvcc -ptx`` often holds several kernels; a spec launches one. Genes
    must edit that one only, and ptxas figures and SASS must be that kernel's, so the
    spec's baseline is narrowed here. Text with one entry, or without ``entry``, comes
    back unchanged (byte for byte: store keys of single-kernel PTX do not move).
    """
    if len(_ENTRY_DECL_RE.findall(text)) < 2:
        return text
    module = parse(text)
    if entry not in {f.name for f in module.entries}:
        return text
    return Module([p for p in module.parts
                   if isinstance(p, str) or not p.is_entry or p.name == entry]).render()


def parse(text: str, source: str = "<ptx>") -> Module:
    """Parse PTX text into a Module. Raises PtxParseError (with a line number) on bad PTX."""
    from genomes.ptx_parse import parse_module

    return parse_module(text, source)


_SHARED: dict[str, Module] = {}  # PTX text -> its parse, the newest 32 (see parse_shared)
_SHARED_LOCK = threading.Lock()  # kernels are searched in threads


def parse_shared(text: str, source: str = "<ptx>") -> Module:
    """``parse``, kept for a text parsed again and again (a kernel's baseline: by its
    features, its prior's seeds, each gene's no-op test, its best and finalist check; a
    gemm tile's 45-200 ms each, eight times a kernel; ``Module.copy`` takes 0.1 ms): one
    Module shared by every caller, which must never change it (``copy`` it first, as
    ``apply_genome`` does). Kept by text alone: ``source`` names the file in an error."""
    module = _SHARED.get(text)
    if module is None:
        module = parse(text, source)  # two threads may both parse it: the same Module
        with _SHARED_LOCK:
            if len(_SHARED) >= 32:  # the oldest out
                _SHARED.pop(next(iter(_SHARED)), None)
            _SHARED[text] = module
    return module


def parse_instruction(text: str, line: int | None = None, source: str = "<ptx>") -> Instruction:
    """Parse one instruction statement such as ``@%p1 ld.global.b32 { %r1 }, [ %rd1 + 0 ];``."""
    from genomes.ptx_parse import read_instruction

    return read_instruction(text, line, source)


def registers_in(operand: str) -> list[str]:
    """Register names inside one operand string (``{%f1, %f2}`` → ``['%f1', '%f2']``)."""
    return _REG_RE.findall(operand)
