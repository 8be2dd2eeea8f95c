"""Assemble with ``--fmad=false``: ptxas no longer contracts a multiply and an add into
an fma. Results change in the last bits (each product is rounded before the add), so
the spec's tolerance decides; the point is kernels whose fma chains lengthen the
critical path. The option travels in the PTX (``genomes.ptxas_flags``).
"""

from __future__ import annotations

from genomes.ptx import Module
from genomes.ptxas_flags import set_flag
from genomes.transforms.base import Transform


def apply(module: Module) -> int:
    return set_flag(module, "--fmad", "false")


TRANSFORM = Transform(
    name="ptxas_nofmad",
    group="ptxas_fmad",
    summary="assemble with ptxas --fmad=false (no mul+add contraction; results may change "
            "in the last bits)",
    applies_when="always (an option for ptxas, carried in the PTX)",
    params=(),
    apply=apply,
    changes_results=True,
)
