"""Fast exp: nvcc's inlined ``expf(x)`` -> ``ex2.approx(x * log2 e)`` (``__expf``; fast math).

nvcc 13 expands ``expf(x)`` into a range reduction around one ``ex2.approx.ftz.f32``:

    fma.rn.f32 t, x, 0f3BBB989D, 0f3F000000;  cvt.sat.f32.f32 t, t;
    fma.rm.f32 j, t, 0f437C0000, 0f4B400001;  add.f32 j2, j, 0fCB40007F;  neg.f32 nj, j2;
    fma.rn.f32 r, x, 0f3FB8AA3B, nj;          fma.rn.f32 r2, x, 0f32A57060, r;
    mov.b32 u, j;  shl.b32 v, u, 23;  mov.b32 s, v;          // s = 2^n
    ex2.approx.ftz.f32 e, r2;
    mul.f32 y, e, s;                      // or fma.rn.f32 y, e, s, acc (y = acc + exp(x))

(constants either inline or through ``mov.f32 %f, 0f...``). Where exactly this chain is
found (every link the only definition of its register, unpredicated, the same ``x`` and
``j`` throughout, and ``e`` and ``r2`` read only once), it becomes what
``-use_fast_math`` gives: ``mul.f32 r2, x, 0f3FB8AA3B`` feeds the ``ex2`` and the consumer
drops the scale (``mov.f32 y, e`` / ``add.f32 y, e, acc``). The rest of the chain is left
in place, dead, for ptxas to delete; ``s`` keeps its value for any other reader.

Error grows with |x| (``__expf``: 2 + floor(|1.16 x|) ulp, versus ~1 ulp), and results
below 2^-126 flush to zero: the correctness gate's tolerance decides.
"""

from __future__ import annotations

from genomes.ptx import Instruction, Line, Module
from genomes.transforms.base import Transform
from genomes.transforms.fast_rsqrt import def_sites, use_counts

LOG2E = "3FB8AA3B"
_LOG2E_LO = "32A57060"
_BIAS = "CB40007F"


class _Chain:
    """Single-definition lookups in one function."""

    def __init__(self, fn):
        self.fn = fn
        self.sites = def_sites(fn)
        self.uses = use_counts(fn)

    def def_of(self, reg: str, op: str) -> tuple[int, Instruction] | None:
        """The unpredicated only definition of ``reg``, if its opcode is ``op``."""
        found = self.sites.get(reg.strip())
        if not found or len(found) != 1:
            return None
        ins = self.fn.body[found[0]].stmt
        return (found[0], ins) if ins.opcode == op and ins.pred is None else None

    def const(self, operand: str) -> str | None:
        """The hex bits of an f32 constant operand: inline, or a single-def mov of one."""
        text = operand.strip()
        if text[:2] in ("0f", "0F"):
            return text[2:].upper()
        found = self.def_of(text, "mov.f32")
        if found and found[1].operands[1].strip()[:2] in ("0f", "0F"):
            return found[1].operands[1].strip()[2:].upper()
        return None

    def scaled(self, ins: Instruction, const: str) -> tuple[str, str] | None:
        """(x, addend) for ``fma.rn.f32 d, x, C, addend`` with C == const (either order)."""
        if len(ins.operands) != 4:
            return None
        _, a, b, c = (o.strip() for o in ins.operands)
        if self.const(b) == const:
            return a, c
        if self.const(a) == const:
            return b, c
        return None


def _scale_register(chain: _Chain, s: str) -> str | None:
    """``j`` when ``s`` = ``mov.b32(shl.b32(mov.b32(j), 23))``, else None."""
    mov = chain.def_of(s, "mov.b32")
    shl = mov and chain.def_of(mov[1].operands[1], "shl.b32")
    if not shl or shl[1].operands[2].strip() != "23":
        return None
    inner = chain.def_of(shl[1].operands[1], "mov.b32")
    return inner[1].operands[1].strip() if inner else None


def _match(chain: _Chain, k: int, ex2: Instruction):
    """(r2 index, x, consumer index, new consumer) for the expf chain ending at ``ex2``."""
    e, r2 = (o.strip() for o in ex2.operands)
    low = chain.def_of(r2, "fma.rn.f32")
    if low is None or chain.uses[r2] != 1 or chain.uses[e] != 1:
        return None
    lo = chain.scaled(low[1], _LOG2E_LO)
    high = lo and chain.def_of(lo[1], "fma.rn.f32")
    hi = high and chain.scaled(high[1], LOG2E)
    if not hi or hi[0] != lo[0]:
        return None
    x = lo[0]
    neg = chain.def_of(hi[1], "neg.f32")
    add = neg and chain.def_of(neg[1].operands[1], "add.f32")
    if not add:
        return None
    a, b = (o.strip() for o in add[1].operands[1:])
    j = a if chain.const(b) == _BIAS else b if chain.const(a) == _BIAS else None
    consumer_at = next((i for i, ln in enumerate(chain.fn.body)
                        if isinstance(ln.stmt, Instruction) and e in ln.stmt.uses()), None)
    if j is None or consumer_at is None:
        return None
    use = chain.fn.body[consumer_at].stmt
    mods = set(use.mods[:-1])
    if use.op not in ("mul", "fma") or use.mods[-1:] != ("f32",) or not mods <= {"rn", "ftz"}:
        return None
    factors = [o.strip() for o in use.operands[1:3]]
    if e not in factors or (use.op == "fma" and len(use.operands) != 4):
        return None
    s = factors[1 - factors.index(e)]
    if _scale_register(chain, s) != j:
        return None
    ftz = ["ftz"] if "ftz" in mods else []
    if use.op == "mul":
        new = use.with_(opcode="mov.f32", operands=(use.operands[0], e))
    else:
        new = use.with_(opcode=".".join(["add", *ftz, "f32"]),
                        operands=(use.operands[0], e, use.operands[3]))
    return low[0], x, consumer_at, new


def apply(module: Module) -> int:
    changed = 0
    for fn in module.functions:
        chain = _Chain(fn)
        for k, line in enumerate(fn.body):
            ex2 = line.stmt
            if not (isinstance(ex2, Instruction) and ex2.op == "ex2" and ex2.pred is None
                    and "approx" in ex2.mods and ex2.mods[-1] == "f32"
                    and len(ex2.operands) == 2):
                continue
            found = _match(chain, k, ex2)
            if found is None:
                continue
            low_at, x, consumer_at, new = found
            low = fn.body[low_at]
            fn.body[low_at] = Line(low.stmt.with_(opcode="mul.f32", operands=(
                low.stmt.operands[0], x, f"0f{LOG2E}")), low.before, low.after)
            old = fn.body[consumer_at]
            fn.body[consumer_at] = Line(new, old.before, old.after)
            changed += 1
    return changed


TRANSFORM = Transform(
    name="fast_exp",
    group="fast_exp",
    summary="replace nvcc's inlined expf (range reduction + ex2 + scale) with __expf's "
            "ex2.approx(x*log2e); changes results in the last bits",
    applies_when="nvcc's expf expansion whose result feeds one mul or fma (softmax, "
                 "attention, cross-entropy)",
    params=(),
    apply=apply,
    changes_results=True,
)
