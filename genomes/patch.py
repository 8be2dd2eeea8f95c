"""Apply PTX edits written by an LLM: unified diffs or SEARCH/REPLACE blocks.

An LLM's diff is rarely exact: its line numbers drift, it writes spaces where the PTX has
tabs, it drops the leading space of context lines. So each hunk (or block) is located by
its *old* lines (context plus removed lines), compared token by token: whitespace runs,
tabs against spaces, trailing blanks, comments, blank lines and debug directives (``.loc``,
``.file``: the prompt does not show them) do not matter; any other character does. A hunk that cannot be located exactly, or only ambiguously, fails the whole patch
with a reason naming it. Nothing is ever skipped or guessed at silently.

Context lines keep the original text verbatim (its indentation, its comments); added lines
are written as the LLM wrote them.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

_PUNCT = re.compile(r" ?([,;\[\]{}()+\-<>=|@!:]) ?")
_HUNK_HEAD = re.compile(r"^@@\s*(?:-(\d+)(?:,\d+)?)?")
_FENCE = re.compile(r"^[ \t]*(```|~~~)[ \t]*([\w+-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$",
                    re.MULTILINE | re.DOTALL)
_SEARCH = re.compile(r"^<{5,9}\s*SEARCH\s*$", re.IGNORECASE)
_DIVIDE = re.compile(r"^={5,9}\s*$")
_REPLACE = re.compile(r"^>{5,9}\s*REPLACE\s*$", re.IGNORECASE)
_DEBUG = re.compile(r"^\.(?:loc|file)\s")
# A line number copied from the prompt's listing ("12\t", or the older "   12 | "): no
# PTX statement starts with a digit, so a block whose every old line has one lost nothing.
_GUTTER = re.compile(r"^[ \t]*\d+(?:\t| \| ?)")


@dataclass(frozen=True)
class PatchResult:
    """The outcome of ``apply_patch``: the patched text, or the input and why not."""

    ok: bool
    text: str
    hunks: int = 0
    detail: str = ""


@dataclass(frozen=True)
class _Hunk:
    """One edit as a list of (kind, line) ops, kind in ' -+'; ``line`` is 1-based or None.

    ``label`` names it in messages ("hunk 2", "block 1"); ``unique`` demands a single
    occurrence (SEARCH/REPLACE), where a diff hunk may be placed by line number or order.
    """

    label: str
    ops: tuple[tuple[str, str], ...]
    line: int | None = None
    unique: bool = False


class _PatchError(Exception):
    """A patch that cannot be read or applied; the message becomes ``PatchResult.detail``."""


# --------------------------------------------------------------------------- public API


def apply_patch(text: str, patch: str) -> PatchResult:
    """Apply a unified diff or SEARCH/REPLACE blocks to ``text``.

    Hunks apply in order, each to the text as the previous ones left it. Any hunk that
    does not match fails the whole patch: ``ok=False``, ``text`` unchanged and ``detail``
    naming the hunk and quoting the first of its lines that did not match.
    """
    if not patch or not patch.strip():
        return PatchResult(False, text, 0, "empty patch")
    patch = patch.replace("\r\n", "\n")
    if re.search(r"^[ \t]*(```|~~~)", patch, re.MULTILINE):  # a fenced patch or a whole reply
        patch = extract_patch(patch) or patch
    try:
        hunks = _parse(patch)
        lines = text.split("\n")
        prev_end, delta = 0, 0
        for hunk in hunks:
            lines, prev_end, grew = _apply_hunk(lines, hunk, prev_end, delta)
            delta += grew
    except _PatchError as err:
        return PatchResult(False, text, 0, str(err))
    return PatchResult(True, "\n".join(lines), len(hunks), "")


def changed_lines(patch: str) -> list[str]:
    """The lines a patch removes (``-``) and adds (``+``), whitespace runs as one space:
    what it does, in the fewest tokens; [] for a patch that cannot be read."""
    try:
        hunks = _parse(patch)
    except _PatchError:
        return []
    return [kind + " ".join(t.split()) for h in hunks for kind, t in h.ops
            if kind != " " and not silent(t)]


def extract_patch(reply: str) -> str | None:
    """The patch in an LLM reply (a unified diff or SEARCH/REPLACE blocks), or None.

    Fenced blocks are preferred (several are joined, in order); without fences the patch
    is cut from the surrounding prose. Text that holds no complete block and no hunk with
    a changed line is not a patch.
    """
    reply = reply.replace("\r\n", "\n")
    found: list[tuple[str, str]] = []
    for m in _FENCE.finditer(reply):
        kind, body = _find_patch(m.group(3), fenced=True)
        if kind:
            found.append((kind, body))
    if found:
        first = found[0][0]  # a diff and S/R blocks cannot be mixed in one patch
        return "\n".join(body for kind, body in found if kind == first).rstrip("\n") + "\n"
    kind, body = _find_patch(reply, fenced=False)
    return body.rstrip("\n") + "\n" if kind else None


def _find_patch(text: str, fenced: bool) -> tuple[str | None, str]:
    """("sr" | "diff" | None, the patch part of ``text``)."""
    lines = text.split("\n")
    starts = [i for i, ln in enumerate(lines) if _SEARCH.match(ln.strip())]
    ends = [i for i, ln in enumerate(lines) if _REPLACE.match(ln.strip())]
    if starts and ends and ends[-1] > starts[0]:
        body = "\n".join(lines[starts[0]:ends[-1] + 1])
        try:
            _parse_search_replace(body)
            return "sr", body
        except _PatchError:
            return None, ""
    head = next((i for i, ln in enumerate(lines) if ln.startswith(("@@", "--- ", "diff --git"))),
                None)
    if head is None and not fenced:
        return None, ""  # headerless +/- lines in prose are too easily a bullet list
    if fenced:  # the fence delimits the patch
        body = "\n".join(lines[head or 0:])
    else:
        # The diff runs to its last line that is unmistakably a diff line; lines between
        # stay in, so a context line that lost its leading space is kept (it will match,
        # or fail loudly) while trailing prose is left out.
        last = max(i for i in range(head, len(lines))
                   if lines[i].startswith(("+", "-", " ", "\t", "@@")) or i == head)
        body = "\n".join(lines[head:last + 1])
    try:
        hunks = _parse_diff(body)
    except _PatchError:
        return None, ""
    if not any(kind != " " for h in hunks for kind, _ in h.ops):
        return None, ""
    return "diff", body


# --------------------------------------------------------------------------- parsing


def _parse(patch: str) -> list[_Hunk]:
    """The hunks of a patch in either format (SEARCH/REPLACE if it has a SEARCH marker)."""
    if any(_SEARCH.match(ln.strip()) for ln in patch.split("\n")):
        return _parse_search_replace(patch)
    return _parse_diff(patch)


def _parse_search_replace(patch: str) -> list[_Hunk]:
    """Blocks of ``<<<<<<< SEARCH`` / ``=======`` / ``>>>>>>> REPLACE``; text around
    them (file names, prose) is ignored."""
    hunks: list[_Hunk] = []
    state, search, replace = "out", [], []
    for ln in patch.split("\n"):
        marker = ln.strip()
        if state == "out":
            if _SEARCH.match(marker):
                state, search, replace = "search", [], []
        elif state == "search":
            if _DIVIDE.match(marker):
                state = "replace"
            elif _SEARCH.match(marker) or _REPLACE.match(marker):
                raise _PatchError(f"block {len(hunks) + 1}: no '=======' line")
            else:
                search.append(ln)
        elif _REPLACE.match(marker):
            label = f"block {len(hunks) + 1}"
            search, replace = _ungutter(search, replace)
            hunks.append(_Hunk(label, _search_replace_ops(search, replace), None, True))
            state = "out"
        elif _SEARCH.match(marker) or _DIVIDE.match(marker):
            raise _PatchError(f"block {len(hunks) + 1}: no '>>>>>>> REPLACE' line")
        else:
            replace.append(ln)
    if state != "out":
        raise _PatchError(f"block {len(hunks) + 1}: unterminated (no '>>>>>>> REPLACE')")
    if not hunks:
        raise _PatchError("no SEARCH/REPLACE blocks")
    return hunks


def _search_replace_ops(search: list[str], replace: list[str]) -> tuple[tuple[str, str], ...]:
    """Turn a block into diff ops, so lines it leaves alone keep the original's text
    verbatim (the LLM may have retyped them with other whitespace)."""
    sm = difflib.SequenceMatcher(None, [_norm(s) for s in search], [_norm(r) for r in replace],
                                 autojunk=False)
    ops: list[tuple[str, str]] = []
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            ops += [(" ", s) for s in search[i1:i2]]
        else:
            ops += [("-", s) for s in search[i1:i2]] + [("+", r) for r in replace[j1:j2]]
    return tuple(ops)


def _parse_diff(patch: str) -> list[_Hunk]:
    """Hunks of a unified diff. Headers are optional, ``@@`` numbers may be wrong or
    absent; a line without a diff prefix inside a hunk is a context line that lost its
    leading space (so it still has to match)."""
    lines = patch.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()  # trailing blank lines are the end of the text, not blank context
    hunks: list[_Hunk] = []
    ops: list[tuple[str, str]] | None = None
    line_no: int | None = None

    def close() -> None:
        if ops:  # a header or "@@" with no lines under it adds nothing
            old, new = _ungutter([t for k, t in ops if k != "+"], [t for k, t in ops if k == "+"])
            if old != [t for k, t in ops if k != "+"]:
                it_old, it_new = iter(old), iter(new)
                ops[:] = [(k, next(it_new) if k == "+" else next(it_old)) for k, _ in ops]
            hunks.append(_Hunk(f"hunk {len(hunks) + 1}", tuple(ops), line_no))

    if not any(ln.startswith(("@@", "--- ")) for ln in lines):
        body = [ln for ln in lines if ln.strip()]
        if all(ln[0] in "+- \t" for ln in body) and any(ln[0] in "+-" for ln in body):
            ops = []  # a bare diff (only +/-/context lines): one hunk, placed by context
    i = 0
    while i < len(lines):
        ln = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if ln.startswith("--- ") and nxt.startswith("+++ "):
            close()
            ops, line_no = [], None  # a header opens a hunk, for diffs that omit "@@"
            i += 2
            continue
        m = _HUNK_HEAD.match(ln)
        if m:
            close()
            ops, line_no = [], (int(m.group(1)) or None) if m.group(1) else None
        elif ops is None or ln.startswith(("diff --git", "index ", "\\")):
            pass  # before the first hunk, git metadata, "\ No newline at end of file"
        elif ln[:1] in ("-", "+", " "):
            ops.append((ln[0], ln[1:]))
        else:
            ops.append((" ", ln))
        i += 1
    if ops:
        close()
    if not hunks:
        raise _PatchError("no hunks: not a unified diff or SEARCH/REPLACE blocks")
    return hunks


# --------------------------------------------------------------------------- applying


def _norm(line: str) -> str:
    """A line reduced to its tokens: whitespace only separates, so tabs/spaces, runs and
    spaces next to punctuation (``[ %rd1 + 4 ]``) compare equal, while words do not; a
    trailing comment is not part of it."""
    return _PUNCT.sub(r"\1", " ".join(line.split("//", 1)[0].split()))


def silent(line: str) -> bool:
    """A line that is not code: blank, a comment, or a debug directive (``.loc``,
    ``.file``). It never locates an edit, and the LLM's view of the PTX leaves it out."""
    return _silent_norm(_norm(line))


def _silent_norm(code: str) -> bool:
    return not code or bool(_DEBUG.match(code))


def _ungutter(old: list[str], new: list[str]) -> tuple[list[str], list[str]]:
    """Both sides of a block without the line numbers the LLM copied from the listing,
    where every old code line carries one (else unchanged)."""
    code = [t for t in old if t.strip()]
    if not code or not all(_GUTTER.match(t) for t in code):
        return old, new
    return [_GUTTER.sub("", t, count=1) for t in old], [_GUTTER.sub("", t, count=1) for t in new]


def _apply_hunk(lines: list[str], hunk: _Hunk, prev_end: int, delta: int
                ) -> tuple[list[str], int, int]:
    """Apply one hunk to ``lines``; returns (new lines, end of the edit, change in length)."""
    written = [t for kind, t in hunk.ops if kind != "+" and not silent(t)]
    old = [_norm(t) for t in written]
    if not old:
        raise _PatchError(f"{hunk.label}: no context or removed lines to locate it by")
    norms = [_norm(ln) for ln in lines]
    keyed = [i for i, n in enumerate(norms) if not _silent_norm(n)]  # nor do comments, .loc
    keys = [norms[i] for i in keyed]
    hits = [j for j in range(len(keys) - len(old) + 1) if keys[j:j + len(old)] == old]
    if not hits:
        raise _PatchError(f"{hunk.label}: not found: {_first_mismatch(keys, old, written)!r}"
                          " does not match the text")
    j = _choose(hunk, hits, keyed, prev_end, delta)
    out = lines[:keyed[j]]
    p, k = keyed[j], 0
    for kind, t in hunk.ops:
        if kind == "+":
            out.append(t)
        elif silent(t):  # a blank (or comment) old line: follow the original's, if here
            if p < len(lines) and silent(lines[p]):
                if kind == " ":
                    out.append(lines[p])
                p += 1
        else:
            target = keyed[j + k]
            k += 1
            out += lines[p:target]  # blank lines the hunk did not mention stay
            if kind == " ":
                out.append(lines[target])
            p = target + 1
    end = len(out)
    out += lines[p:]
    return out, end, len(out) - len(lines)


def _choose(hunk: _Hunk, hits: list[int], keyed: list[int], prev_end: int, delta: int) -> int:
    """Pick one occurrence of the hunk's old lines, or fail as ambiguous.

    SEARCH/REPLACE blocks must be unique. A diff hunk takes the occurrence at its stated
    line (shifted by what earlier hunks added or removed) if there is one; else it prefers
    occurrences after the previous hunk (diffs are written in order), then the one
    nearest its stated line.
    """
    where = ", ".join(str(keyed[j] + 1) for j in hits[:6]) + (", ..." if len(hits) > 6 else "")
    ambiguous = _PatchError(f"{hunk.label}: ambiguous: its lines occur {len(hits)} times "
                            f"(lines {where}); add context or a line number")
    if len(hits) == 1:
        return hits[0]
    if hunk.unique:
        raise ambiguous
    want = None
    if hunk.line is not None:
        # The stated line is that of the first old line, which may be a blank one.
        lead = next(i for i, (kind, t) in enumerate(o for o in hunk.ops if o[0] != "+")
                    if not silent(t))
        want = hunk.line - 1 + delta + lead
        exact = [j for j in hits if keyed[j] == want]
        if exact:
            return exact[0]
    after = [j for j in hits if keyed[j] >= prev_end] or hits
    if len(after) == 1:
        return after[0]
    if want is None:
        raise ambiguous
    dist = sorted((abs(keyed[j] - want), j) for j in after)
    if dist[0][0] == dist[1][0]:  # two equally near: the number does not decide
        raise ambiguous
    return dist[0][1]


def _first_mismatch(keys: list[str], old: list[str], written: list[str]) -> str:
    """The first old line that does not match, after the longest run of them that does
    somewhere (so the message points at the line the LLM got wrong)."""
    best = 0
    for j in range(len(keys)):
        n = 0
        while n < len(old) and j + n < len(keys) and keys[j + n] == old[n]:
            n += 1
        best = max(best, n)
    line = " ".join(written[min(best, len(old) - 1)].split())
    return line if len(line) <= 70 else line[:67] + "..."
