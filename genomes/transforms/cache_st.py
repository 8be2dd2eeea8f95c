"""Global store cache policy: ``st.global.{wb,cg,cs,wt}``.

Only plain (weak) global stores change; volatile/relaxed/release stores and stores with
an eviction hint keep their form.
"""

from __future__ import annotations

from genomes.memory import effect, with_cache_operator
from genomes.ptx import Instruction, Module
from genomes.transforms.base import Param, Transform

STORE_POLICIES = ("wb", "cg", "cs", "wt")


def apply(module: Module, policy: str) -> int:
    def change(ins: Instruction) -> Instruction | None:
        if (ins.op == "st" and ins.space == "global" and effect(ins) == "store"
                and not any("::" in m for m in ins.mods)):
            return with_cache_operator(ins, policy, STORE_POLICIES)
        return None

    return sum(fn.rewrite(change) for fn in module.functions)


TRANSFORM = Transform(
    name="cache_st",
    group="st_cache",
    summary="set the cache operator of global stores (wb/cg/cs/wt)",
    applies_when="plain global stores",
    params=(Param("policy", default="cs", choices=STORE_POLICIES),),
    apply=apply,
)
