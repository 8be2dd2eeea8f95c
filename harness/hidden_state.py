"""Static check: a variant may keep no state of its own across launches.

Why: the harness times a variant by launching it again and again on the same input. A
variant that remembers something between launches in ``.global`` variables ("last input
pointer", "last x[0]", a launch counter) could notice the repeat and skip the work it is
timed on (the result-reuse hole). Registers, ``.local`` and ``.shared`` memory die with the
launch, a kernel cannot write ``.const``, and a ``.global`` only read (a lookup table) or
written by the baseline too keeps nothing new: all allowed.

Writes of a ``.global`` v (``.extern`` or in a function too): a ``[...]`` operand naming v in
anything but a load (``ld*``, ``ldmatrix``, ``prefetch*``, ``cp.async``'s source): ``st``,
``atom``, ``red``, ``mbarrier``, ``multimem``...; v's address as a stored value (``st``,
``st.param`` to a call or as the return value, an ``atom``/``red`` operand), in a ``call`` or
in another variable's initializer; each also through a register derived from v's address.
Per function, an instruction taking v as a value (``mov``, ``cvta``, ``add``...) taints its
destination, and so does any instruction with a tainted source but a load and the
predicate-valued ``setp``/``testp``/``isspacep``, to a fixpoint. Ignoring order and branches
(flow-insensitive) taints every register any path can derive from v, maybe more: no write is
missed, an odd one may be over-counted. A loaded value carries no taint: memory can hold v's
address only after a store of it or an initializer naming it, both rejected.
"""

from __future__ import annotations

import bisect
import re

from harness import record
from harness.timer_reads import added_timer_read

# Comments go (keeping their newlines, so line numbers hold); strings stay whole.
_COMMENT = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/', re.S)
# Directives that end without ';' and would otherwise glue themselves to the next statement.
_BARE_DIRECTIVE = re.compile(r"^[ \t]*\.(?:version|target|address_size|file|loc)\b[^\n]*", re.M)
# Cheap test on the raw text: a ".global" that is no ld.global or .ptr .global may declare one.
_ANY_GLOBAL = re.compile(r"\.global\b(?<![\w.]\.global)(?<!\.ptr \.global)")
_DECL = re.compile(r"\s*(?:\.(?:visible|weak|extern|common)\s+)*\.global\s")
_DECL_NAME = re.compile(r"(?:\s*(?:\.[\w:]+(?:\s*\([^)]*\))?|\d+))*\s*([A-Za-z_$%][\w$]*)")
_PUNCT = re.compile(r"[,{}()\[\]]")
_FUNC = re.compile(r"\.(?:entry|func)\b")
_LABELS = re.compile(r"\s*(?:[\w$%]+\s*:(?!:)\s*)*")
_INSN = re.compile(r"(?:@!?%?[\w$]+\s+)?([A-Za-z_][\w.:]*)")
_OPERAND = re.compile(r"(?:[^,\[{(]|\[[^\]]*\]|\{[^}]*\}|\([^)]*\))+")  # [a, {b}], {c, d}, (e, f)
_REG = re.compile(r"%[A-Za-z_$][\w$]*")
_READS = {"ld", "ldu", "ldmatrix", "prefetch", "prefetchu"}
_PRED = {"setp", "testp", "isspacep"}  # their destination is a predicate: no address
_VERB = {"writes": "writes", "stores": "stores the address of", "passes": "passes the address of",
         "takes": "takes the address of"}
_HOW = ("held in a register", "through an address")
_WHY = "state kept across launches lets a variant skip work it was timed on"


def _blank(m: re.Match) -> str:
    s = m.group()
    return s if s[0] == '"' else "\n" * s.count("\n") + " "


def _clean(ptx: str) -> str:
    return _BARE_DIRECTIVE.sub("", _COMMENT.sub(_blank, ptx))


def _statements(text: str) -> list[tuple[int, int, int]]:
    """(start, end, function) of each ';'-terminated statement, in functions (numbered from 1)
    and at module scope (0, with its '= {...}' initializer), not in .section blocks. A '{'
    within a statement is a vector."""
    out, depth, kind, start, vec, fn = [], 0, "", 0, 0, 0
    for m in re.finditer(r"[;{}]", text):
        c, p = m.group(), m.start()
        if c == ";" and (depth == 0 or kind == "code"):
            out.append((start, p, fn if depth else 0))
            start = p + 1
        elif depth == 0:
            if c == "{":  # a function body, a variable's initializer or a .section
                kind = "code" if _FUNC.search(text, start, p) else "init" if "=" in text[start:p] else "data"
                depth, fn = 1, fn + (kind == "code")
            if c == "}" or kind == "code":
                start = p + 1
        elif kind == "code":
            if c == "{" and (vec or _LABELS.match(text, start, p).end() < p):
                vec += 1
            elif c == "}" and vec:
                vec -= 1
            else:
                depth, start = depth + (1 if c == "{" else -1), p + 1
        else:
            depth += {"{": 1, "}": -1}.get(c, 0)
            start = p + 1 if depth == 0 and kind == "data" else start
    return out


def _decls(text: str, stmts) -> dict[int, str]:
    """Position -> name of each .global variable declared (`.global .u32 a, b[2] = {1, 2};`)."""
    out, ends, seen = {}, [s[1] for s in stmts], set()
    for g in _ANY_GLOBAL.finditer(text):
        i = bisect.bisect_right(ends, g.start())
        m = i < len(stmts) and i not in seen and _DECL.match(text, stmts[i][0], stmts[i][1])
        seen.add(i)
        if m:
            end, depth, lo = stmts[i][1], 0, m.end()
            for p in [*_PUNCT.finditer(text, lo, end), None]:
                if p is None or (depth == 0 and p.group() == ","):
                    n = _DECL_NAME.match(text, lo, p.start() if p else end)
                    out.update({n.start(1): n.group(1)} if n else {})
                    lo = p and p.end()
                else:
                    depth += (p.group() in "{([") - (p.group() in "})]")
    return out


def module_globals(ptx: str) -> dict[str, int]:
    """The ``.global`` variables of ``ptx``: name -> 1-based line of its first declaration."""
    if not _ANY_GLOBAL.search(ptx):
        return {}
    text, found = _clean(ptx), {}
    for pos, name in sorted(_decls(text, _statements(text)).items()):
        found.setdefault(name, text.count("\n", 0, pos) + 1)
    return found


def _parse(text: str, start: int, end: int):
    """(start past the labels, opcode or None for a declaration, [(lo, hi, role)] of its
    top-level operands, none for a load or a predicate's setp: no operand of theirs matters).
    Roles: "writes" (an address written through), "stores" (a value written to memory),
    "passes" (to a call), "dest"/"src" (of a computation) or None (harmless)."""
    lab = _LABELS.match(text, start, end).end()
    ins = _INSN.match(text, lab, end)
    if not ins:
        return lab, None, []
    op = ins.group(1)
    root, cp = op.split(".")[0], op.startswith("cp.async")
    if root in _READS or root in _PRED or cp and ".prefetch" in op:
        return lab, op, []
    ops = [(m.start(), m.end(), "[" in m.group()) for m in _OPERAND.finditer(text, ins.end(), end)]
    if root == "call":
        return lab, op, [(a, b, "passes") for a, b, _ in ops]
    written = [b and not (cp and k == 1) for k, (_, _, b) in enumerate(ops)]
    if any(written):  # value operands are stored; a leading register is a result (atom)
        roles = ["writes" if w else None if b or k == 0 else "stores"
                 for k, (w, (_, _, b)) in enumerate(zip(written, ops))]
    else:
        roles = ["dest"] + ["src"] * (len(ops) - 1)
    return lab, op, [(a, b, r) for (a, b, _), r in zip(ops, roles)]


def _derived(text: str, stmts, seeds: dict[str, list[tuple[str, int]]]):
    """Writes through registers derived from a variable's address in one function's
    ``stmts``; ``seeds``: name -> [(register given its address, position of that statement)]."""
    edges, sinks, out = {}, [], []
    for start, end, _ in stmts:
        lab, _, ops = _parse(text, start, end)
        regs = [(_REG.findall(text, a, b), role) for a, b, role in ops]
        for r in {r for rs, role in regs if role == "src" for r in rs}:
            edges.setdefault(r, set()).update(regs[0][0])
        sinks += [(r, role, lab, end) for rs, role in regs if role in _VERB for r in rs]
    for name, todo in seeds.items():
        taint, line = {}, {pos: text.count("\n", 0, pos) + 1 for _, pos in todo}
        for r, pos in todo:  # todo grows while walked: a breadth-first search
            if r not in taint:
                taint[r] = pos
                todo += [(d, pos) for d in edges.get(r, ())]
        out += [(lab, end, name, f"{_VERB[role]} module variable {name} {_HOW[role == 'writes']} "
                 f"derived from it (line {line[taint[r]]})")
                for r, role, lab, end in sinks if r in taint]
    return out


def _writes(text: str, stmts, decls: dict[int, str], names):
    """(start, end, name, what it does) of each write of one of ``names``, in text order."""
    # no look-behind in the pattern: it would cost the fast search for the names
    pat = re.compile(r"(?:" + "|".join(map(re.escape, sorted(names))) + r")(?![\w$])")
    ends, out, seeds = [s[1] for s in stmts], [], {}
    for occ in pat.finditer(text):
        q, name = occ.start(), occ.group()
        i = bisect.bisect_right(ends, q)
        if q and (text[q - 1].isalnum() or text[q - 1] in "_$%."):
            continue  # the tail of a longer name, a register or a directive
        if i == len(stmts) or q < stmts[i][0]:
            continue  # outside any statement (a .section block, a function header)
        start, end, fn = stmts[i]
        lab, op, ops = _parse(text, start, end)
        # an initializer naming it holds its address; in no operand: in a label or the opcode
        init = "takes" if op is None and q not in decls else None
        role = next((r for a, b, r in ops if a <= q < b), init)
        if role in _VERB:
            out.append((lab, end, name, f"{_VERB[role]} module variable {name}"))
        elif role in ("src", "dest"):  # its address as a value: a seed of the taint
            dest = _REG.findall(text, ops[0][0], ops[0][1])
            seeds.setdefault(fn, {}).setdefault(name, []).extend((r, lab) for r in dest)
    for fn, found in seeds.items():
        out += _derived(text, [s for s in stmts if s[2] == fn], found)
    return sorted(out, key=lambda w: w[0])  # stable: a statement's operands in order


def hidden_state(variant_ptx: str, baseline_ptx: str) -> str | None:
    """None when the variant adds no writable module-scope state and no read of a clock
    (``harness.timer_reads``); else the reason, starting with harness.record.HIDDEN_STATE
    ("hidden state") or TIMER_READ, naming the variable or register and the line."""
    timer = added_timer_read(variant_ptx, baseline_ptx)
    if timer is not None:
        return timer
    if not _ANY_GLOBAL.search(variant_ptx):
        return None
    text = _clean(variant_ptx)
    stmts = _statements(text)
    decls = _decls(text, stmts)
    found = _writes(text, stmts, decls, set(decls.values())) if decls else []
    if not found:
        return None
    base = _clean(baseline_ptx)
    base_stmts = _statements(base)
    allowed = {w[2] for w in _writes(base, base_stmts, _decls(base, base_stmts), {w[2] for w in found})}
    for start, end, name, what in found:
        if name not in allowed:
            line, insn = text.count("\n", 0, start) + 1, " ".join(text[start:end].split())
            return (f"{record.HIDDEN_STATE}: line {line} `{insn};` {what}, "
                    f"which the baseline never writes ({_WHY})")
    return None
