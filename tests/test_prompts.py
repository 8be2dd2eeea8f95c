"""Prompt templates and the feedback they render: real ptxas, real suite kernels."""

from __future__ import annotations

import re

import pytest

from evo.llm.feedback import build_mutate_context, build_repair_context, ptx_view
from evo.llm.prompts import PromptError, PromptSet
from genomes.genome import GeneOutcome, Genome, PatchGene, apply_genome, parse_inline
from harness.compile import compile_ptx
from harness.record import Measurement
from harness.kernels.suite import find_kernel
from tests.conftest import needs_ptxas


def _measured(kernel: str, cycles: float, timer: str = "clock64") -> Measurement:
    return Measurement(kernel, "test-gpu", True, cycles=cycles, n=200, timer=timer,
                       backend="static" if timer == "static" else "gpu")


def _shown(number: int, text: str) -> str:
    """How the listing shows a line: its 1-based number, a tab, the code with its
    whitespace runs as one space (the listing's compact form)."""
    return f"{number}\t{' '.join(text.split())}"


def _numbered(lines: list[str], text: str) -> str:
    """How the prompt shows the first line equal to ``text``."""
    return _shown(lines.index(text) + 1, text)


@needs_ptxas
def test_mutate_prompt_shows_ptxas_figures_cycles_and_numbered_ptx():
    spec = find_kernel("gemm_tile_8x8x8")
    genome = parse_inline("vec_ld,maxnreg(n=64)")
    applied = apply_genome(spec.ptx_text(), genome)
    expected = compile_ptx(applied.ptx)
    assert expected.ok and expected.spilled  # 64 registers is below 8x8x8's natural count
    ctx = build_mutate_context(
        spec, genome, _measured(spec.name, 2676), _measured(spec.name, 8388),
        parse_inline("vec_ld,vec_st,maxnreg(n=128)"), applied.outcomes,
        ["vec_st,cache_ld(policy=cg): +36% cycles"],
        [{"label": "vectorize B loads", "attempts": 4, "successes": 3, "mean_gain": 0.25}],
        max_ptx_lines=1000, best=_measured(spec.name, 1518))
    system, user = (m["content"] for m in PromptSet(None).messages("mutate", ctx))

    assert "METHOD:" in system and "RATIONALE:" in system and "SEARCH" in system
    assert f"{expected.registers} registers" in user
    assert f"{expected.spill_stores} bytes spill stores" in user
    assert f"{expected.spill_loads} bytes spill loads" in user
    assert "2676 cycles (clock64" in user and "8388 cycles (clock64" in user
    assert "1518 cycles" in user and "vec_ld(width=4),vec_st(width=4),maxnreg(n=128)" in user
    lines = applied.ptx.splitlines()
    assert _numbered(lines, ".maxnreg 64") in user
    assert _numbered(lines, "\tld.global.v4.f32 \t{%f5, %f6, %f7, %f8}, [%rd4+16];") in user
    assert "`vec_ld(width=4)`: applied (32 changes)" in user
    assert "+36% cycles" in user and '"vectorize B loads": 3 of 4' in user
    assert "FFMA" in user or "unavailable" in user
    assert "static estimate" not in user
    assert "`gemm_tile_8x8x8_param_2` (C): pointer to 64 x f32, output" in user
    # The same context renders the same prompt (the LLM cache keys on it).
    assert PromptSet(None).messages("mutate", ctx)[1]["content"] == user
    # Lines copied from the prompt, gutter removed, are the PTX: an edit made of them applies.
    shown = re.search(r"^\d+\t(ld\.global\.v4\.f32 \{%f5,.*)$", user, re.MULTILINE)
    cached = shown.group(1).replace("ld.global.", "ld.global.ca.", 1)
    edit = PatchGene(f"<<<<<<< SEARCH\n{shown.group(1)}\n=======\n{cached}\n"
                     ">>>>>>> REPLACE\n", "cache all", "checks the view")
    patched = apply_genome(spec.ptx_text(), Genome(genome.genes + (edit,)))
    assert patched.outcomes[-1].status == "applied"


def _cuobjdump_here() -> bool:
    from harness.toolchain import MissingToolError, find_cuobjdump

    try:
        find_cuobjdump()
        return True
    except MissingToolError:
        return False


@needs_ptxas
@pytest.mark.skipif(not _cuobjdump_here(), reason="no cuobjdump: the prompt says the SASS is unavailable")
def test_the_real_sass_histogram_of_the_variant_reaches_the_prompt():
    """The opcode counts the prompt quotes are those of the variant's own machine code,
    disassembled here independently of the prompt's code path (issue 32)."""
    from harness.sass import disassemble, opcode_histogram

    spec = find_kernel("gemm_tile_8x8x8")
    genome = parse_inline("vec_ld,maxnreg(n=64)")
    applied = apply_genome(spec.ptx_text(), genome)
    hist = opcode_histogram(disassemble(compile_ptx(applied.ptx).cubin))
    ctx = build_mutate_context(spec, genome, _measured(spec.name, 2676), _measured(spec.name, 8388),
                               None, applied.outcomes, [], [], max_ptx_lines=1000)
    user = PromptSet(None).messages("mutate", ctx)[1]["content"]
    line = next(x for x in user.splitlines() if f"({sum(hist.values())} instructions in all)" in x)
    for op, n in hist.most_common(5):
        assert f"{op} {n}" in line, (op, n, line)
    assert "FFMA" in line and "unavailable" not in user


@needs_ptxas
def test_long_kernel_is_cut_to_its_hottest_region_and_says_so():
    spec = find_kernel("gemm_tile_16x16x16")
    ctx = build_mutate_context(spec, Genome(), None, None, None, None, [], [],
                               max_ptx_lines=400)
    user = PromptSet().render("mutate", **ctx)
    assert ctx["ptx"]["truncated"] and ctx["ptx"]["total_lines"] > 4000
    shown = re.findall(r"^\d+\t", ctx["ptx"]["text"], re.MULTILINE)
    assert len(shown) == ctx["ptx"]["shown_lines"] <= 400
    assert "hottest region" in user and "elided" in user
    lines = spec.ptx_text().splitlines()
    assert _numbered(lines, "\t.reg .f32 \t%f<4609>;") in user  # declarations are kept
    assert _numbered(lines, "\tret;") in user
    assert "not measured yet" in user and "(no genes: the current PTX is the baseline)" in user


def test_a_loop_is_shown_whole_as_the_hottest_region():
    spec = find_kernel("softmax")
    lines = spec.ptx_text().splitlines()
    view = ptx_view(spec.ptx_text(), spec.entry, max_lines=60)
    assert view["truncated"] and "innermost loop" in view["region"]
    back = max(i for i, l in enumerate(lines) if re.search(r"bra\s+\$L__BB0_\d+;", l)
               and lines.index(l.split()[-1].rstrip(";") + ":") < i)
    label = lines.index(lines[back].split()[-1].rstrip(";") + ":")
    for i in range(label, back + 1):
        if lines[i].strip():  # blank lines are not shown
            assert _shown(i + 1, lines[i]) in view["text"]
    small = find_kernel("gemm_tile_2x2x2")
    whole = ptx_view(small.ptx_text(), small.entry)
    assert not whole["truncated"] and "elided" not in whole["text"]


@needs_ptxas
def test_static_cycles_are_labelled_as_static_estimates():
    spec = find_kernel("gemm_tile_2x2x2")
    genome = parse_inline("vec_ld")
    patch = PatchGene("-x\n+y\n", "unroll k", "fewer branches")
    outcomes = apply_genome(spec.ptx_text(), genome).outcomes + [
        GeneOutcome(patch, "failed", detail="hunk 1 does not match")]
    ctx = build_mutate_context(spec, genome, _measured(spec.name, 900, "static"),
                               _measured(spec.name, 850, "static"), None, outcomes, [], [])
    user = PromptSet().render("mutate", **ctx)
    assert "900 (static estimate, not measured)" in user
    assert "850 (static estimate, not measured)" in user
    assert "not from a GPU" in user and ctx["static"]
    assert (f"2. `{patch}`: failed: hunk 1 does not match (method \"unroll k\": fewer branches)"
            in user)


@needs_ptxas
def test_sass_histogram_says_unavailable_without_cuobjdump(monkeypatch):
    import harness.sass

    monkeypatch.setattr(harness.sass, "disassemble", lambda cubin, timeout=60: None)
    spec = find_kernel("gemm_tile_2x2x2")
    ctx = build_mutate_context(spec, Genome(), None, None, None, None, [], [])
    assert not ctx["sass"]["available"] and ctx["resources"]["ok"]
    assert "SASS opcode histogram" in PromptSet().render("mutate", **ctx)
    assert "unavailable" in PromptSet().render("mutate", **ctx)


def test_user_prompt_dir_overrides_one_template(tmp_path):
    (tmp_path / "mutate.j2").write_text("MY PROMPT for {{ kernel.name }}\n")
    prompts = PromptSet(tmp_path)
    assert prompts.render("mutate", kernel={"name": "k1"}) == "MY PROMPT for k1\n"
    assert prompts.source_of("mutate") == tmp_path.resolve() / "mutate.j2"
    # not overridden: the built-in one, which names the target arch of the context
    system = prompts.render("system.j2", target={"arch": "sm_100", "family": "Blackwell"})
    assert "METHOD:" in system and prompts.source_of("system").parent.name == "prompts"
    assert "(Blackwell, sm_100)" in system and "sm_90" not in system
    assert PromptSet("").source_of("mutate").parent.name == "prompts"  # config default


def test_undefined_variable_or_missing_template_is_a_prompt_error(tmp_path):
    (tmp_path / "mutate.j2").write_text("{{ kernel.name }}\n{{ no_such_thing }}\n")
    (tmp_path / "repair.j2").write_text("{{ kernel.nmae }}\n")
    prompts = PromptSet(tmp_path)
    named = r"mutate\.j2:2 \(in `\{\{ no_such_thing \}\}`\): 'no_such_thing' is undefined"
    with pytest.raises(PromptError, match=named):
        prompts.render("mutate", kernel={"name": "k"})
    with pytest.raises(PromptError, match=r"repair\.j2.*nmae"):
        prompts.messages("repair", {"kernel": {"name": "k"}, "target": {"arch": "sm_90a",
                                                                      "family": "Hopper"}})
    with pytest.raises(PromptError, match="'nope.j2' not found"):
        prompts.render("nope")
    with pytest.raises(PromptError, match="unknown prompt kind"):
        prompts.messages("explain", {})
    with pytest.raises(PromptError, match="not a folder"):
        PromptSet(tmp_path / "missing")
    (tmp_path / "system.j2").write_text("{% if %}\n")
    with pytest.raises(PromptError, match=r"system\.j2:1: syntax error"):
        PromptSet(tmp_path).render("system")


def test_repair_prompt_has_the_error_the_failed_patch_and_its_target():
    spec = find_kernel("gemm_tile_4x4x4")
    ptx = spec.ptx_text()
    lines = ptx.splitlines()
    target = "\tld.global.f32 \t%f3, [%rd4+8];"
    diff = ("--- a/kernel.ptx\n+++ b/kernel.ptx\n@@ -99,3 +99,2 @@\n"
            " \tld.global.f32 \t%f2, [%rd4+4];\n-" + target + "\n"
            "-\tld.global.f32 \t%f4, [%rd4+12];\n+\tld.global.v2.f32 \t{%f3, %f4}, [%rd4+8];\n")
    gene = PatchGene(diff, "vectorize A loads", "two loads become one")
    ctx = build_repair_context(spec, ptx, gene, "hunk 1 (line 99) does not match the PTX")
    system, user = (m["content"] for m in PromptSet().messages("repair", ctx))
    assert "METHOD:" in system
    assert "hunk 1 (line 99) does not match the PTX" in user and "failed\nto apply" in user
    assert diff.rstrip("\n") in user and "METHOD: vectorize A loads" in user
    assert _numbered(lines, target) in user and ctx["region"]["found"]

    # An edit that assembled badly: the ptxas line is shown from the patched text.
    bad = "\tld.global.v2.f32 \t{%f3, %f99}, [%rd4+8];"
    search = f"<<<<<<< SEARCH\n{target}\n=======\n{bad}\n>>>>>>> REPLACE\n"
    patched = ptx.replace(target, bad)
    line = patched.splitlines().index(bad) + 1
    error = f"line {line}: error: Unknown symbol '%f99'"
    ctx = build_repair_context(spec, ptx, search, error, stage="assemble", patched_ptx=patched)
    user = PromptSet().render("repair", **ctx)
    assert "to assemble with ptxas" in user and error in user
    assert _shown(line, bad) in user
    assert _numbered(lines, target) in user


@needs_ptxas
def test_the_prompt_states_buffer_alignment_as_a_fact():
    from harness.gpu.buffers import BUFFER_ALIGN

    context = build_mutate_context(find_kernel("relu"), Genome(), None, None, None, None,
                                   [], [])
    user = PromptSet().messages("mutate", context)[1]["content"]
    assert f"Every buffer starts on a {BUFFER_ALIGN}-byte boundary" in user
