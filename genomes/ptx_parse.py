"""Reading PTX text into the model of ``genomes.ptx`` (use ``genomes.ptx.parse``).

Text between functions is kept verbatim; a function body is split into statements, each
keeping the whitespace and comments around it, so that printing an unchanged module gives
back the input byte for byte. Bad PTX raises ``PtxParseError`` with the line number.
"""

from __future__ import annotations

import re

from genomes.errors import PtxParseError
from genomes.ptx import (Directive, Function, Instruction, Label, Line, Module, Other, Param,
                         Statement)

_FUNC_RE = re.compile(r"^[ \t]*((?:\.(?:visible|weak|extern)\s+)*)\.(entry|func)\b", re.M)
_OPCODE_RE = re.compile(r"[a-z][a-z0-9_]*(\.[a-zA-Z0-9_:]+)*$")
_PRED_RE = re.compile(r"@!?%[\w$]+$")


def parse_module(text: str, source: str = "<ptx>") -> Module:
    """Parse PTX text into a Module. Raises PtxParseError (with a line number) on bad PTX."""
    if not re.search(r"^\s*\.version\s+\d+\.\d+", text, re.M):
        raise PtxParseError("no '.version' directive: is this PTX?", 1, source)
    if not re.search(r"^\s*\.target\s+\w+", text, re.M):
        raise PtxParseError("no '.target' directive", 1, source)
    parts: list[str | Function] = []
    pos = 0  # end of what is already in ``parts``
    search_from = 0
    found = False
    while True:
        m = _FUNC_RE.search(text, search_from)
        if not m:
            break
        open_paren, end_sig = _signature_end(text, m.end(), source)
        brace = _next_code_char(text, end_sig, "{;")
        if brace is None:
            raise PtxParseError("function header without body or ';'",
                                _line_of(text, m.start()), source)
        if text[brace] == ";":  # a declaration: stays in the raw text before the next part
            search_from = brace + 1
            continue
        close = _matching_brace(text, brace, source)
        parts.append(text[pos:m.start()])
        name = _func_name(text[m.end():open_paren if open_paren else end_sig])
        body_start_line = _line_of(text, brace)
        fn = Function(
            name=name,
            is_entry=m.group(2) == "entry",
            signature=text[m.start():end_sig],
            directives=text[end_sig:brace],
            body=_parse_body(text[brace + 1:close], body_start_line, source),
            params=_parse_params(text[open_paren + 1:end_sig - 1] if open_paren else ""),
        )
        parts.append(fn)
        pos = search_from = close + 1
        found = True
    if not found:
        raise PtxParseError("no .entry or .func with a body found", None, source)
    parts.append(text[pos:])
    return Module(parts)


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _skip_comment(text: str, i: int) -> int | None:
    """If a comment starts at i, the index after it; else None."""
    if text.startswith("//", i):
        j = text.find("\n", i)
        return len(text) if j < 0 else j
    if text.startswith("/*", i):
        j = text.find("*/", i + 2)
        return len(text) if j < 0 else j + 2
    return None


def _next_code_char(text: str, i: int, chars: str) -> int | None:
    while i < len(text):
        after = _skip_comment(text, i)
        if after is not None:
            i = after
            continue
        if text[i] in chars:
            return i
        if not text[i].isspace() and text[i] != "." and not text[i].isalnum() \
                and text[i] not in ",_$":
            return None
        i += 1
    return None


def _signature_end(text: str, i: int, source: str) -> tuple[int | None, int]:
    """Return (index of the param '(' or None, index just after the header's ')' chain)."""
    # .func may have a return-value list first: .func (.reg .b32 r) name (params)
    end = i
    open_paren = None
    j = i
    while True:
        k = _next_code_char(text, j, "({;")
        if k is None or text[k] != "(":
            return open_paren, end
        depth, q = 0, k
        while q < len(text):
            if text[q] == "(":
                depth += 1
            elif text[q] == ")":
                depth -= 1
                if depth == 0:
                    break
            q += 1
        else:
            raise PtxParseError("unclosed '(' in function header", _line_of(text, k), source)
        open_paren, end, j = k, q + 1, q + 1


def _func_name(header: str) -> str:
    header = re.sub(r"\([^)]*\)", " ", header)  # drop a .func return list
    names = re.findall(r"[A-Za-z_$][\w$]*", header)
    return names[-1] if names else "?"


_BRACE_OR_COMMENT = re.compile(r"//|/\*|[{}]")


def _matching_brace(text: str, i: int, source: str) -> int:
    # From one brace or comment start to the next by a regular expression: a character
    # at a time in Python, this scan cost ~1.5 ms of the 5.5 ms that a 330-line tile's
    # clock64 twin took (parsed again for every candidate; BENCHMARKS.md, session 25).
    depth = 0
    while (m := _BRACE_OR_COMMENT.search(text, i)) is not None:
        token, i = m.group(), m.end()
        if token in ("//", "/*"):
            i = _skip_comment(text, m.start())  # a comment starts there: never None
        elif token == "{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return m.start()
    raise PtxParseError("unclosed '{': function body never ends", None, source)


def _parse_params(text: str) -> list[Param]:
    params = []
    for chunk in _split_top(text, ","):
        words = chunk.split()
        if not words or words[0] != ".param":
            continue
        types = [w for w in words[1:] if w.startswith(".")]
        dtype = next((t for t in types if re.fullmatch(r"\.[busf]\d+", t)), "")
        name = re.sub(r"\[.*", "", words[-1])
        params.append(Param(name, dtype, ".ptr" in types or dtype in (".u64", ".b64", ".s64")))
    return params


_BRACKETS = re.compile(r"[()\[\]{}]")


def _split_top(text: str, sep: str) -> list[str]:
    """Split at ``sep`` outside (), [] and {}."""
    if not _BRACKETS.search(text):  # most operand lists: a plain split says the same
        return [s.strip() for s in text.split(sep) if s.strip()]
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [s.strip() for s in out if s.strip()]


_SPACES = re.compile(r"\s+")


def _parse_body(body: str, first_line: int, source: str) -> list[Line]:
    """Split a body into Lines: each statement with its leading and trailing text."""
    lines: list[Line] = []
    pending = ""  # whitespace/comments waiting to become the next statement's prefix
    i, n = 0, len(body)
    counted, line_no = 0, first_line  # line_no is the line of body[counted]
    while i < n:
        after = _skip_comment(body, i)
        if after is not None:
            pending += body[i:after]
            i = after
            continue
        if body[i].isspace():  # the whole run of it at once
            run = _SPACES.match(body, i).end()
            pending += body[i:run]
            i = run
            continue
        line_no += body.count("\n", counted, i)
        counted = i
        end, stmt_text = _statement_at(body, i, line_no, source)
        # Trailing text: spaces/comments up to and including the newline stay with it.
        j = end
        while j < n and body[j] in " \t":
            j += 1
        if body.startswith("//", j):
            j = _skip_comment(body, j)
        if j < n and body[j] == "\n":
            j += 1
        else:
            j = end
        lines.append(Line(_classify(stmt_text, line_no, source), pending, body[end:j]))
        pending = ""
        i = j
    if pending:  # whitespace before the closing brace
        lines.append(Line(Other(""), pending, ""))
    return lines


_LABEL_AT = re.compile(r"[$%A-Za-z_][\w$]*:")


def _statement_at(body: str, i: int, line: int, source: str) -> tuple[int, str]:
    """Return (end index, text) of the statement starting at i (on line ``line``)."""
    if body[i] in "{}":
        return i + 1, body[i]
    if body.startswith(".loc", i):  # debug line info: no ';', ends at the newline
        j = body.find("\n", i)
        j = len(body) if j < 0 else j
        return j, body[i:j].rstrip()
    m = _LABEL_AT.match(body, i)  # at i, without copying the rest of the body
    if m:
        return m.end(), m.group(0)
    j = body.find(";", i)
    if j >= 0 and not _BRACKETS.search(body, i, j):  # no bracket before the first ';'
        return j + 1, body[i:j + 1]
    depth = 0
    j = i
    while j < len(body):
        ch = body[j]
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == ";" and depth == 0:
            return j + 1, body[i:j + 1]
        j += 1
    raise PtxParseError(f"statement not terminated by ';': {body[i:].splitlines()[0]!r}",
                        line, source)


def _classify(text: str, line: int, source: str) -> Statement:
    if text in ("{", "}") or text.startswith(".loc"):
        return Other(text)
    if text.endswith(":"):
        return Label(text[:-1], text)
    if text.startswith("."):
        return Directive(text)
    return read_instruction(text, line, source)


def read_instruction(text: str, line: int | None = None, source: str = "<ptx>") -> Instruction:
    """Parse one instruction statement such as ``@%p1 ld.global.b32 { %r1 }, [ %rd1 + 0 ];``."""
    body = text.rstrip()
    if not body.endswith(";"):
        raise PtxParseError(f"instruction must end with ';': {text!r}", line, source)
    body = body[:-1].strip()
    pred = None
    if body.startswith("@"):
        pred, _, body = body.partition(" ")
        body = body.strip()
        if not _PRED_RE.match(pred):
            raise PtxParseError(f"bad predicate guard {pred!r}", line, source)
    opcode, _, rest = body.partition(" ") if " " in body.split("\t")[0] else body.partition("\t")
    opcode = opcode.strip()
    if not _OPCODE_RE.match(opcode):
        raise PtxParseError(f"not an instruction: {text.strip()!r}", line, source)
    operands = tuple(_split_top(rest, ","))
    for operand in operands:
        if operand.count("[") != operand.count("]") or operand.count("{") != operand.count("}"):
            raise PtxParseError(f"unbalanced brackets in {operand!r}", line, source)
    return Instruction(opcode, operands, pred, text)
