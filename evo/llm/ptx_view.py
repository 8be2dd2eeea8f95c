"""The PTX an LLM is shown: numbered lines, cut to the kernel's hottest region when long.

``ptx_view`` keeps the module's header, the entry's signature and declarations, and the
hottest region of its body: basic blocks are scored by memory and arithmetic work (x8 per
loop nesting level); the best one (or its innermost loop, when that fits) is shown, and
every gap is marked as elided. Line numbers are the real ones, so a diff or a ptxas error
lines up with what the LLM saw.

Tokens are what an LLM call costs, and the listing is most of a prompt, so it is compact
at equal content: ``12<tab>code`` with whitespace runs as one space; lines that are not
code (blank, comments, ``.loc``/``.file`` debug directives, ``.section .debug_*`` blocks:
half of a Triton kernel's lines) are not shown and need not appear in an edit
(``genomes.patch`` locates edits without them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from genomes.patch import silent

LOOP_WEIGHT = 8  # a loop body runs many times: weight its work per nesting level

_MEM_OPS = frozenset({"ld", "ldu", "st", "atom", "red", "cp", "ldmatrix", "stmatrix", "tex",
                      "tld4", "suld", "sust", "prefetch", "prefetchu", "mma", "wmma", "wgmma"})
_ARITH_OPS = frozenset({"add", "sub", "mul", "mad", "mul24", "mad24", "fma", "div", "rem", "abs",
                        "neg", "min", "max", "rcp", "sqrt", "rsqrt", "sin", "cos", "lg2", "ex2",
                        "tanh", "and", "or", "xor", "not", "shl", "shr", "shf", "lop3", "selp",
                        "set", "setp", "cvt", "popc", "clz", "bfe", "bfi", "brev", "prmt", "sad",
                        "dp4a", "dp2a", "shfl", "copysign", "testp", "fns"})
_ENDS_BLOCK = frozenset({"bra", "brx", "ret", "exit", "trap"})
_LABEL_RE = re.compile(r"^([$%\w.]+):")
_OPCODE_RE = re.compile(r"^(?:@!?%[\w$]+\s+)?([a-z][\w]*)")
# The bytes of a long initializer (Triton's assert messages and file names): never edited.
_LONG_INIT = re.compile(r"=\s*\{[^{}]{60,}\}\s*;\s*$")
_BRA_TARGET_RE = re.compile(r"\bbra(?:\.uni)?\s+([$%\w.]+)\s*;")

def hidden_lines(lines: Sequence[str]) -> set[int]:
    """Indices of the lines the listing leaves out: ``genomes.patch.silent`` ones, and
    every line of a ``.section .debug_*`` block (DWARF bytes, after the code)."""
    hidden, in_debug = set(), False
    for i, line in enumerate(lines):
        code = _code(line)
        if code.startswith(".section") and ".debug" in code:
            in_debug = True
        if in_debug or silent(line):
            hidden.add(i)
        if in_debug and code.startswith("}"):
            in_debug = False
    return hidden


def render_kept(lines: Sequence[str], kept: list[int],
                hidden: set[int] | None = None) -> tuple[str, list[str]]:
    """Numbered text of the kept line indices (1-based numbers of the real text, then a
    tab, then the code with its whitespace runs as one space), hidden lines left out, with
    one marker per elided gap of code lines; and the gaps as "a-b"."""
    hidden = hidden_lines(lines) if hidden is None else hidden  # the caller's, if known
    out, gaps = [], []
    for prev, i in zip([-1] + kept, kept + [len(lines)]):
        code = [j for j in range(prev + 1, i) if j not in hidden]
        if code:  # code lines between two kept ones are not shown
            a, b, n = code[0] + 1, code[-1] + 1, len(code)
            out.append(f"... lines {a}-{b} elided ({n} line{'s' * (n != 1)} of code) ...")
            gaps.append(f"{a}-{b}")
        if i < len(lines) and i not in hidden:
            out.append(f"{i + 1}\t{_LONG_INIT.sub('= {...};', ' '.join(_code(lines[i]).split()))}")
    return "\n".join(out), gaps


def _code(line: str) -> str:
    return line.split("//", 1)[0].strip()


def _entry_span(lines: Sequence[str], entry: str) -> tuple[int, int, int]:
    """(signature line, body ``{`` line, closing ``}`` line) of ``entry``; whole text if
    the entry cannot be found, so that a strange module still gets a view."""
    start = next((i for i, l in enumerate(lines)
                  if re.search(rf"\.entry\s+{re.escape(entry)}\b", _code(l))), None)
    if start is None:
        return 0, 0, len(lines) - 1
    open_ = next((i for i in range(start, len(lines)) if "{" in _code(lines[i])), start)
    depth = 0
    for i in range(open_, len(lines)):
        code = _code(lines[i])
        depth += code.count("{") - code.count("}")
        if depth <= 0:
            return start, open_, i
    return start, open_, len(lines) - 1


def ptx_view(ptx: str, entry: str, max_lines: int = 400) -> dict:
    """The PTX as the prompt shows it: numbered lines (numbers of the real text, so that
    diffs and ptxas errors line up), all of it when it fits in ``max_lines``.

    Otherwise: the module's directives, the entry's signature and declarations, its
    hottest region and its final lines. The hottest region is the basic block with most
    memory + arithmetic instructions (memory counted twice: most edits that pay are about
    loads and stores), weighted ``LOOP_WEIGHT`` per loop level; an innermost loop that
    fits is shown whole; the region is padded with its surroundings up to the budget, or,
    when longer than the budget, cut to the window with the most such instructions.
    """
    real = ptx.splitlines()
    total = len(real)
    hidden = hidden_lines(real)
    vis = [i for i in range(total) if i not in hidden]
    if len(vis) <= max_lines:
        text, _ = render_kept(real, list(range(total)), hidden)
        return {"text": text, "total_lines": total, "shown_lines": len(vis), "truncated": False,
                "region": "the whole module", "elided": []}
    # The choice works on the code lines alone (indices into ``vis``), so that the budget
    # counts what is shown; numbers in what it says are the real ones.
    lines = [real[i] for i in vis]
    total = len(lines)
    start, open_, close = _entry_span(lines, entry)
    # Module directives (.version, .target): the whole prologue when short, as it
    # usually is, so that blank lines do not show up as elisions.
    first = next((i for i in range(start) if _code(lines[i]).startswith(".")), start)
    fixed = list(range(first, start)) if start - first <= 24 else \
        [i for i in range(first, start) if _code(lines[i]).startswith(".")][:12]
    fixed += list(range(start, open_ + 1))
    body = open_ + 1
    while body < close and (not _code(lines[body]) or _code(lines[body]).startswith(".")):
        fixed.append(body)  # .reg / .shared / .local declarations: registers in use
        body += 1
    last = max([i for i in range(body, close) if _code(lines[i])] or [close])
    after = close + 1  # blank lines after the entry, when nothing else follows
    while after < total and not _code(lines[after]) and after - close <= 3:
        after += 1
    tail = list(range(last, close + 1)) + list(range(close + 1, after))
    budget = max(20, max_lines - len(fixed) - len(tail))
    lo, hi, what = _hot_region(lines, body, last, budget, lambda k: vis[k] + 1)
    kept = sorted(set(fixed) | set(range(lo, hi + 1)) | set(tail))
    text, gaps = render_kept(real, [vis[k] for k in kept], hidden)
    region = f"the hottest region: {what}"
    return {"text": text, "total_lines": len(real), "shown_lines": len(kept), "truncated": True,
            "region": region, "elided": gaps}


def _weight(line: str) -> int:
    m = _OPCODE_RE.match(_code(line))
    op = m.group(1) if m else ""
    return 2 if op in _MEM_OPS else 1 if op in _ARITH_OPS else 0


def _hot_region(lines: Sequence[str], first: int, end: int, budget: int,
                number: Callable[[int], int] = lambda i: i + 1) -> tuple[int, int, str]:
    """Inclusive line range [lo, hi] (within [first, end)) of at most ``budget`` lines;
    ``number`` gives an index's line number for what it says."""
    if end <= first:
        return first, first - 1, "an empty body"
    labels, blocks, loops = {}, [], []
    cur = first
    for i in range(first, end):
        code = _code(lines[i])
        if m := _LABEL_RE.match(code):
            labels[m.group(1)] = i
            if i > cur:
                blocks.append((cur, i - 1))
            cur = i
        op = _OPCODE_RE.match(code)
        if op and op.group(1) in _ENDS_BLOCK:
            blocks.append((cur, i))
            cur = i + 1
    if cur < end:
        blocks.append((cur, end - 1))
    for i in range(first, end):
        if (t := _BRA_TARGET_RE.search(_code(lines[i]))) and labels.get(t.group(1), end) <= i:
            loops.append((labels[t.group(1)], i))  # a backward branch closes a loop
    weights = [_weight(lines[i]) if first <= i < end else 0 for i in range(len(lines))]

    def score(block):
        depth = sum(a <= block[0] and block[1] <= b for a, b in loops)
        return sum(weights[block[0]:block[1] + 1]) * LOOP_WEIGHT ** depth

    lo, hi = max(blocks or [(first, end - 1)], key=lambda b: (score(b), -b[0]))
    inner = [(a, b) for a, b in loops if a <= lo and hi <= b and b - a + 1 <= budget]
    if inner:
        lo, hi = min(inner, key=lambda s: s[1] - s[0])
        what = f"the innermost loop at lines {number(lo)}-{number(hi)}, shown whole"
    else:
        what = f"the basic block at lines {number(lo)}-{number(hi)}"
    if hi - lo + 1 > budget:
        # The densest window of the block (prefix sums: blocks run to thousands of lines).
        acc = [0]
        for w in weights:
            acc.append(acc[-1] + w)
        best = max(range(lo, hi - budget + 2), key=lambda s: (acc[s + budget] - acc[s], -s))
        if best - lo <= budget // 10:
            best = lo  # a few denser lines are worth less than seeing where the block starts
        what += (f" ({hi - lo + 1} lines of code), cut to its {budget} densest lines "
                 f"{number(best)}-{number(best + budget - 1)}")
        return best, best + budget - 1, what
    pad = budget - (hi - lo + 1)  # fill the budget with the region's surroundings
    new_lo = max(first, lo - pad // 2)
    new_hi = min(end - 1, new_lo + budget - 1)
    new_lo = max(first, new_hi - budget + 1)
    if (new_lo, new_hi) != (lo, hi):
        what += f", with lines {number(new_lo)}-{number(new_hi)} around it"
    return new_lo, new_hi, what


# --------------------------------------------------------------------------- repair
