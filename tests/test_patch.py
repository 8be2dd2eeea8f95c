"""LLM-written PTX edits (unified diffs, SEARCH/REPLACE blocks) on real suite PTX."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from genomes import ptx
from genomes.genome import Gene, Genome, PatchGene, apply_genome
from genomes.patch import PatchResult, apply_patch, changed_lines, extract_patch

PTX = (Path(__file__).resolve().parents[1] / "harness" / "kernels"
       / "gemm_tile_4x4x4.ptx").read_text()

LD_OLD = "\tld.global.f32 \t%f1, [%rd4];"
LD_NEW = "\tld.global.nc.f32 \t%f1, [%rd4];"
FMA_OLD = "\tfma.rn.f32 \t%f50, %f6, %f21, %f49;"
FMA_NEW = "\tfma.rn.f32 \t%f50, %f6, %f22, %f49;"


def _edited(text: str = PTX) -> str:
    assert text.count(LD_OLD) == 1 and text.count(FMA_OLD) == 1
    return text.replace(LD_OLD, LD_NEW).replace(FMA_OLD, FMA_NEW)


def _diff(old: str, new: str, n: int = 3) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                        "a/kernel.ptx", "b/kernel.ptx", n=n))


def _shift(diff: str, by: int) -> str:
    """The same diff with every @@ line number moved by ``by`` (at least 1)."""
    def move(m: re.Match) -> str:
        return f"{m.group(1)}{max(1, int(m.group(2)) + by)}"
    return "\n".join(re.sub(r"([-+])(\d+)", move, ln) if ln.startswith("@@") else ln
                     for ln in diff.split("\n"))


def _two_kernels() -> str:
    """A real module holding the suite kernel twice (a second entry with another name),
    so any context inside the body occurs twice."""
    start = PTX.index(".visible .entry")
    second = PTX[start:].replace("gemm_tile_4x4x4", "gemm_tile_4x4x4_b")
    return PTX + "\n" + second


def _line_of(text: str, needle: str, nth: int = 0) -> int:
    hits = [i + 1 for i, ln in enumerate(text.split("\n")) if ln == needle]
    return hits[nth]


# --------------------------------------------------------------------------- unified diff


def test_correct_diff_applies_and_round_trips():
    diff = _diff(PTX, _edited())
    assert diff.count("@@ -") == 2
    r = apply_patch(PTX, diff)
    assert r == PatchResult(True, _edited(), 2, "")
    assert ptx.parse(r.text).render() == r.text


@pytest.mark.parametrize("by", [7, -20])
def test_wrong_line_numbers_still_apply(by):
    diff = _shift(_diff(PTX, _edited()), by)
    assert diff != _diff(PTX, _edited())
    r = apply_patch(PTX, diff)
    assert r.ok and r.text == _edited() and r.hunks == 2


def test_missing_line_numbers_and_headers_apply():
    diff = re.sub(r"^@@.*@@$", "@@ ... @@", _diff(PTX, _edited()), flags=re.MULTILINE)
    assert apply_patch(PTX, diff).text == _edited()
    no_headers = "\n".join(ln for ln in diff.split("\n") if not ln.startswith(("---", "+++")))
    assert apply_patch(PTX, no_headers).text == _edited()


def test_spaces_for_tabs_match_and_context_keeps_the_original_tabs():
    diff = _diff(PTX, _edited())
    spaced = "\n".join(ln if ln.startswith(("+", "@@")) else ln.replace("\t", "    ")
                       for ln in diff.split("\n"))
    assert "\t" not in "".join(ln for ln in spaced.split("\n") if ln.startswith((" ", "-")))
    r = apply_patch(PTX, spaced)
    assert r.ok and r.text == _edited()
    # Added lines are kept as written; only they differ from the tab-indented result.
    all_spaced = apply_patch(PTX, diff.replace("\t", "  ")).text
    assert all_spaced == PTX.replace(LD_OLD, "  ld.global.nc.f32   %f1, [%rd4];").replace(
        FMA_OLD, "  fma.rn.f32   %f50, %f6, %f22, %f49;")


def test_empty_context_lines_without_their_space_still_match():
    # The two blank lines after the .reg lines come as bare empty lines, as LLMs write them.
    diff = ("@@ -22,6 +22,6 @@\n \t.reg .f32 \t%f<97>;\n \t.reg .b64 \t%rd<7>;\n\n\n"
            "-\tld.param.u64 \t%rd1, [gemm_tile_4x4x4_param_0];\n"
            "+\tld.param.u64 \t%rd1, [gemm_tile_4x4x4_param_0+0];\n")
    r = apply_patch(PTX, diff)
    assert r.ok, r.detail
    assert r.text == PTX.replace("[gemm_tile_4x4x4_param_0];", "[gemm_tile_4x4x4_param_0+0];")


def test_context_not_in_the_file_fails_naming_the_hunk():
    diff = _diff(PTX, _edited()).replace(" \tfma.rn.f32 \t%f48,", " \tfma.rn.f32 \t%f148,")
    r = apply_patch(PTX, diff)
    assert not r.ok and r.text == PTX and r.hunks == 0
    assert r.detail.startswith("hunk 2: not found") and "%f148" in r.detail


def test_a_removed_line_that_is_absent_fails():
    diff = ("@@ -31,3 +31,3 @@\n \tcvta.to.global.u64 \t%rd5, %rd2;\n"
            "-\tld.global.f32 \t%f1, [%rd5];\n+\tld.global.nc.f32 \t%f1, [%rd5];\n"
            " \tld.global.f32 \t%f2, [%rd4+4];\n")
    r = apply_patch(PTX, diff)
    assert not r.ok and r.text == PTX
    assert "hunk 1" in r.detail and "ld.global.f32 %f1, [%rd5];" in r.detail


def test_ambiguous_context_fails_without_line_numbers_and_resolves_with_them():
    text = _two_kernels()
    hunk = f" \tcvta.to.global.u64 \t%rd5, %rd2;\n-{LD_OLD}\n+{LD_NEW}\n"
    r = apply_patch(text, "@@ ... @@\n" + hunk)
    assert not r.ok and r.detail.startswith("hunk 1: ambiguous") and "2 times" in r.detail
    for nth in (0, 1):
        line = _line_of(text, LD_OLD, nth) - 1 + 3  # a few lines off, nearer this copy
        r = apply_patch(text, f"@@ -{line},2 +{line},2 @@\n" + hunk)
        assert r.ok, r.detail
        lines = r.text.split("\n")
        assert lines[_line_of(text, LD_OLD, nth) - 1] == LD_NEW
        assert r.text.count(LD_NEW) == 1 and r.text.count(LD_OLD) == 1


def test_hunks_apply_in_order_after_the_previous_one():
    text = _two_kernels()
    # Hunk 1 is unique (it names the second entry); hunk 2's lines occur in both copies,
    # but only once after hunk 1, so that is the one it edits.
    diff = ("@@ ... @@\n .visible .entry gemm_tile_4x4x4_b(\n"
            "-\t.param .u64 gemm_tile_4x4x4_b_param_0,\n"
            "+\t.param .u64 .ptr .global gemm_tile_4x4x4_b_param_0,\n"
            f"@@ ... @@\n-{FMA_OLD}\n+{FMA_NEW}\n")
    r = apply_patch(text, diff)
    assert r.ok and r.hunks == 2, r.detail
    first, second = r.text.split(".visible .entry gemm_tile_4x4x4_b(")
    assert FMA_OLD in first and FMA_NEW in second and ".ptr .global" in second
    assert ptx.parse(r.text).render() == r.text


def test_two_hunks_second_failing_fails_the_whole_patch():
    diff = f"@@ -31 @@\n-{LD_OLD}\n+{LD_NEW}\n@@ -70 @@\n-\tfma.rn.f32 \t%f50, %f6;\n+x\n"
    r = apply_patch(PTX, diff)
    assert not r.ok and r.text == PTX and r.detail.startswith("hunk 2:")


def test_empty_no_op_and_unreadable_patches():
    assert apply_patch(PTX, "") == PatchResult(False, PTX, 0, "empty patch")
    assert apply_patch(PTX, "  \n").detail == "empty patch"
    same = apply_patch(PTX, f"@@ -31 @@\n-{LD_OLD}\n+{LD_OLD}\n")
    assert same.ok and same.text == PTX and same.hunks == 1
    junk = apply_patch(PTX, "Use ld.global.nc for the A loads.")
    assert not junk.ok and "no hunks" in junk.detail


def test_a_fenced_reply_can_be_applied_directly():
    reply = f"Here:\n```diff\n{_diff(PTX, _edited())}```\nThis makes A loads use the nc path."
    assert apply_patch(PTX, reply).text == _edited()


# --------------------------------------------------------------------------- SEARCH/REPLACE


def _block(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


def test_search_replace_single_block():
    r = apply_patch(PTX, _block(LD_OLD, LD_NEW))
    assert r == PatchResult(True, PTX.replace(LD_OLD, LD_NEW), 1, "")


def test_search_replace_multiple_blocks_keep_untouched_lines_verbatim():
    # The LLM retyped the context with spaces; the lines it did not change stay as read.
    ctx = "    cvta.to.global.u64 %rd5, %rd2;"
    patch = ("kernel.ptx\n" + _block(f"{ctx}\n{LD_OLD.strip()}", f"{ctx}\n{LD_NEW}")
             + "\nand\n" + _block(FMA_OLD, FMA_NEW))
    r = apply_patch(PTX, patch)
    assert r.ok and r.hunks == 2 and r.text == _edited(), r.detail
    assert ptx.parse(r.text).render() == r.text


def test_search_replace_must_match_exactly_one_place():
    r = apply_patch(_two_kernels(), _block(LD_OLD, LD_NEW))
    assert not r.ok and r.detail.startswith("block 1: ambiguous")
    r = apply_patch(PTX, _block(LD_OLD, LD_NEW) + _block("\tld.global.f32 \t%f1, [%rd9];", ""))
    assert not r.ok and r.text == PTX and r.detail.startswith("block 2: not found")
    r = apply_patch(PTX, f"<<<<<<< SEARCH\n{LD_OLD}\n=======\n{LD_NEW}\n")
    assert not r.ok and "block 1" in r.detail


# --------------------------------------------------------------------------- extract_patch


def test_extract_fenced_diff_from_prose():
    diff = _diff(PTX, _edited())
    reply = f"The A loads are read-only, so:\n\n```diff\n{diff}```\n\nThis should help L1."
    assert extract_patch(reply) == diff
    assert apply_patch(PTX, extract_patch(reply)).text == _edited()


def test_extract_search_replace_in_a_fence():
    blocks = _block(LD_OLD, LD_NEW) + _block(FMA_OLD, FMA_NEW)
    reply = f"Two edits.\n```ptx\n{blocks}```\nDone."
    got = extract_patch(reply)
    assert got == blocks and apply_patch(PTX, got).text == _edited()


def test_extract_unfenced_diff_and_plain_fence():
    diff = _diff(PTX, _edited())
    assert extract_patch(f"Patch follows.\n{diff}\nThat is all.") == diff
    assert extract_patch(f"```\n{diff}```") == diff


@pytest.mark.parametrize("reply", [
    "Use ld.global.nc.f32 for the loads of A; they are read-only.",
    "- first, vectorize the loads\n- then drop the bounds check\n",
    "```ptx\n" + PTX + "```",                               # a whole kernel, not an edit
    "<<<<<<< SEARCH\n\tld.global.f32 \t%f1, [%rd4];\n",     # an unterminated block
    "@@ -1,2 +1,2 @@\n context only\n",                    # a hunk that changes nothing
])
def test_extract_returns_none_without_a_patch(reply):
    assert extract_patch(reply) is None


# --------------------------------------------------------------------------- genomes


def test_patch_gene_through_apply_genome():
    gene = PatchGene(_diff(PTX, _edited()), "nc-loads", "A is read-only")
    applied = apply_genome(PTX, Genome((gene,)))
    assert applied.ptx == _edited() and applied.outcomes[0].status == "applied"
    assert applied.outcomes[0].changes == 2
    # A patch after a transform sees the transformed PTX; one that no longer matches fails.
    bad = PatchGene(_block("\tld.global.f32 \t%f1, [%rd9];", LD_NEW))
    out = apply_genome(PTX, Genome((Gene.make("maxnreg", n=64), gene, bad)))
    assert [o.status for o in out.outcomes] == ["applied", "applied", "failed"]
    assert out.outcomes[2].detail.startswith("block 1: not found")
    assert LD_NEW in out.ptx and ".maxnreg 64" in out.ptx


# --------------------------------------------------------------------------- the LLM's listing

TRITON = (Path(__file__).resolve().parent / "data" / "unseen" / "triton" / "rms_norm.ptx").read_text()


def test_an_edit_copied_from_the_listing_applies_across_the_lines_it_hides():
    """The prompt's listing hides blank, comment and .loc lines and numbers each line
    ``N<tab>code``: an edit of consecutive shown lines (a .loc between them in the real
    text) applies, the hidden lines stay where they were, and a copied gutter is dropped."""
    from evo.llm.ptx_view import ptx_view

    real = TRITON.splitlines()
    shown = ptx_view(TRITON, re.search(r"\.entry (\w+)", TRITON).group(1))["text"].splitlines()
    assert not any(".loc" in ln or "//" in ln for ln in shown)
    numbers = [int(ln.split("\t")[0]) for ln in shown]
    # two shown lines whose real lines have a hidden .loc line between them
    k = next(k for k in range(len(shown) - 1) if numbers[k + 1] > numbers[k] + 1
             and any(real[i].strip().startswith(".loc") for i in range(numbers[k], numbers[k + 1] - 1))
             and real[numbers[k] - 1].strip().startswith(("ld.", "mov.", "add.", "mul.")))
    first, second = (ln.split("\t", 1)[1] for ln in shown[k:k + 2])
    for copied in (f"{first}\n{second}", f"{shown[k]}\n{shown[k + 1]}"):  # gutter or not
        r = apply_patch(TRITON, _block(copied, f"{first}\n{second}\n// marked"))
        assert r.ok, r.detail
        out = r.text.splitlines()
        assert len(out) == len(real) + 1 and out.index("// marked") == numbers[k + 1]
        assert out[:numbers[k + 1]] == real[:numbers[k + 1]]  # the .loc kept in place
    r = apply_patch(TRITON, _block(f"{shown[k]}\nnot.a.line;", "x;"))
    assert not r.ok and "not found" in r.detail


def test_changed_lines_are_what_a_patch_removes_and_adds_in_either_format():
    want = ["-ld.global.f32 %f1, [%rd4];", "+ld.global.nc.f32 %f1, [%rd4];"]
    assert changed_lines(_block(f"\tcvta.to.global.u64 \t%rd5, %rd2;\n{LD_OLD}",
                                f"\tcvta.to.global.u64 \t%rd5, %rd2;\n{LD_NEW}")) == want
    assert changed_lines(_diff(PTX, PTX.replace(LD_OLD, LD_NEW))) == want
    assert changed_lines("no patch here") == []
