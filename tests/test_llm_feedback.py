"""The mutate prompt's profiling and search context: memory throughput against the copy
roofline, theoretical occupancy, the target arch, top variants, per-gene effects, what the
transform genes do, all within a character budget (evo.llm.context, evo.llm.occupancy)."""

from __future__ import annotations

from pathlib import Path

import pytest

import llm_server as fake
from conftest import needs_ptxas
from evo.config import LlmConfig
from evo.llm import context
from evo.llm.feedback import build_mutate_context, build_repair_context
from evo.llm.mutation import LlmMutator, SearchView
from evo.llm.occupancy import SM_LIMITS, occupancy, target_of
from evo.llm.prompts import PromptSet
from genomes import transforms
from genomes.genome import Genome, parse_inline
from harness.record import Measurement
from harness.kernels.spec import load_spec
from harness.kernels.suite import find_kernel

llm_server = fake.llm_server  # the fixture
TRITON = Path(__file__).parent / "data" / "unseen" / "triton"
COPY_GBPS = 2900.0


def _summary(spec, cycles, us=None, valid=True, timer="events", launch=None) -> dict:
    """What KernelSearch.known holds for one result (evo.search.summary)."""
    s = {"cycles": cycles, "valid": valid, "reason": "ok" if valid else "wrong result",
         "timer": timer, "device": "test-gpu", "backend": "static" if timer == "static"
         else "gpu", "registers": 20, "spill_stores": 0, "cached": False, "p10": cycles,
         "p90": cycles, "n": 50, "flags": []}
    if us:
        s.update(us_per_launch=us, bytes_moved=spec.bytes_read + spec.bytes_written,
                 copy_gbps=COPY_GBPS, caches="warm (inputs reused across launches)")
    if launch:
        s["launch"] = launch
    return s


RESULTS = [("", 20000), ("vec_ld(width=4)", 15000), ("vec_ld(width=4),cache_ld(policy=cs)", 14000),
           ("cache_ld(policy=cs)", 19500), ("fast_exp", 18000), ("fast_exp,vec_ld(width=4)", 13000),
           ("reorder(strategy=loads_first)", 21000)]


def _known(spec, timer="events", results=RESULTS) -> dict:
    """Results of a search: us per launch scales with cycles (events timer only)."""
    known = {}
    for text, cycles in results:
        us = 11.0 * cycles / 20000 if timer == "events" else None
        known[_key(text)] = _summary(spec, cycles, us, timer=timer)
    known[_key("ftz(scope=all)")] = _summary(spec, None, valid=False, timer=timer)
    return known


def _key(text: str) -> str:
    return (parse_inline(text) if text else Genome()).effective().dumps()


def _m(spec, cycles, timer="events", notes=None) -> Measurement:
    return Measurement(spec.name, "test-gpu", True, cycles=cycles, n=50, timer=timer,
                       backend="static" if timer == "static" else "gpu", notes=notes or {})


# --------------------------------------------------------------------------- occupancy


@pytest.mark.parametrize("regs,threads,smem,blocks,share,binding", [
    (32, 256, 0, 8, 1.0, ["threads", "registers"]),  # 8 x 8 warps; 32 x 32 x 64 = 65536
    (128, 256, 0, 2, 0.25, ["registers"]),  # 4096 per warp: 4 per sub-partition, 16 warps
    (40, 96, 0, 16, 0.75, ["registers"]),  # 1280 per warp: 12 x 4 = 48 warps / 3 per block
    (64, 1024, 0, 1, 0.5, ["registers"]),  # 2048 per warp x 32 warps = the whole file
    (16, 32, 0, 32, 0.5, ["blocks"]),  # one-warp blocks: the 32 block slots bind
    (32, 256, 48 * 1024, 4, 0.5, ["shared_mem"]),  # 49 KB allocated: 228 // 49 = 4
    (32, 256, 57 * 1024, 3, 0.375, ["shared_mem"]),  # 4 x 57 KB fit, 4 x (57 + 1 reserved) not
    (255, 1024, 0, 0, 0.0, ["registers"]),  # 8192 per warp x 32 warps: does not fit
])
def test_occupancy_matches_hand_computation(regs, threads, smem, blocks, share, binding):
    o = occupancy("sm_90", regs, threads, dynamic_smem=smem)
    assert o["available"] and o["blocks_per_sm"] == blocks
    assert o["occupancy"] == pytest.approx(share) and o["binding"] == binding
    assert f"{100 * share:.0f} %" in o["text"] if blocks else "does not fit" in o["text"]


def test_occupancy_uses_the_arch_table_and_says_when_it_has_none():
    assert occupancy("sm_90a", 128, 256) == {**occupancy("sm_90", 128, 256), "arch": "sm_90a"}
    assert SM_LIMITS["sm_90"].smem_per_sm == 228 * 1024 and SM_LIMITS["sm_90"].regs_per_sm == 65536
    # sm_80 has 164 KB of shared memory per SM, not Hopper's 228 KB
    assert occupancy("sm_80", 32, 256, dynamic_smem=48 * 1024)["blocks_per_sm"] == 3
    unknown = occupancy("sm_75", 32, 256)
    assert not unknown["available"] and "sm_75" in unknown["text"]
    assert "no register count" in occupancy("sm_90", None, 256)["text"]


# --------------------------------------------------------------------------- target arch


def test_target_arch_comes_from_the_ptx_or_the_compile_arch():
    for ptx in sorted(TRITON.glob("*.ptx")):
        assert target_of(ptx.read_text(), "sm_90")["arch"] == "sm_90a"
    softmax = find_kernel("softmax").ptx_text()  # .target sm_90: the compile arch decides
    assert target_of(softmax, "sm_100") == {"arch": "sm_100", "family": "Blackwell",
                                            "ptx_target": "sm_90"}
    system = PromptSet().render("system", target=target_of(softmax, "sm_100"))
    assert "sm_100" in system and "sm_90" not in system and "Hopper" not in system
    spec = load_spec(TRITON / "rms_norm.toml")
    repair = build_repair_context(spec, spec.ptx_text(), "-a\n+b\n", "no match")
    assert repair["target"]["arch"] == "sm_90a"
    assert "ptxas for sm_90a" in PromptSet().messages("repair", repair)[0]["content"]


@needs_ptxas
def test_triton_kernel_prompt_names_sm_90a_and_its_occupancy():
    spec = load_spec(TRITON / "rms_norm.toml")
    ctx = build_mutate_context(spec, Genome(), None, None, None, None, [], [])
    system, user = (m["content"] for m in PromptSet().messages("mutate", ctx))
    assert ctx["target"]["arch"] == ctx["resources"]["arch"] == "sm_90a"
    assert "(Hopper, sm_90a)" in system and "ptxas for sm_90a" in system
    assert "Target: sm_90a (Hopper)." in user and "ptxas (sm_90a)" in user
    occ = ctx["profile"]["occupancy"]
    assert occ["available"] and occ["arch"] == "sm_90a"
    assert "Theoretical occupancy on sm_90a" in user and "blocks of 128 threads per SM" in user


# --------------------------------------------------------------------------- memory


@needs_ptxas
def test_events_timed_prompt_holds_gb_per_s_and_the_roofline_share():
    spec = find_kernel("softmax")
    moved = spec.bytes_read + spec.bytes_written  # 8388608: 4 MiB in, 4 MiB out
    ctx = build_mutate_context(spec, parse_inline("vec_ld"), _m(spec, 20000),
                               _m(spec, 15000), None, None, [], [], known=_known(spec))
    user = PromptSet().render("mutate", **ctx)
    base_gbps, cur_gbps = moved / 11.0 / 1e3, moved / 8.25 / 1e3
    assert f"Baseline: 11.00 µs per launch = {base_gbps:.0f} GB/s, " \
           f"{100 * base_gbps / COPY_GBPS:.0f} % of the copy roofline (2900 GB/s)" in user
    assert f"Current variant: 8.25 µs per launch = {cur_gbps:.0f} GB/s" in user
    assert ctx["profile"]["current"]["share"] == pytest.approx(cur_gbps / COPY_GBPS, abs=1e-4)
    assert "caches warm" in user and "8.39 MB per launch (4.19 MB read + 4.19 MB written" in user
    assert "static estimate" not in user
    # A backend's own record carries the figures in its notes (no search summary needed).
    notes = {"us_per_launch": 11.0, "bytes_moved": moved, "copy_gbps": COPY_GBPS}
    ctx = build_mutate_context(spec, Genome(), _m(spec, 20000, notes=notes), None, None,
                               None, [], [])
    assert f"{100 * base_gbps / COPY_GBPS:.0f} % of the copy roofline" in \
        PromptSet().render("mutate", **ctx)


@needs_ptxas
def test_a_launch_gene_shows_the_variants_launch_and_its_occupancy():
    spec = find_kernel("relu")
    ctx = build_mutate_context(spec, parse_inline("block(threads=128)"), None, None, None,
                               None, [], [])
    user = PromptSet().render("mutate", **ctx)
    assert ctx["launch"]["variant"] == {"grid": [8192, 1, 1], "block": [128, 1, 1],
                                        "blocks": 8192, "threads_per_block": 128}
    assert "genes changed the launch: grid [8192, 1, 1], block [128, 1, 1]" in user
    assert "blocks of 128 threads per SM" in user
    assert "`block(threads=128)`: applied" in user  # applied with the spec's launch


# --------------------------------------------------------------------------- search context


def test_top_variants_and_gene_effects_in_genome_notation():
    spec = find_kernel("softmax")
    search = context.search_context(_known(spec), 20000, k=5)
    assert search["top"] == [  # GB/s: 8388608 bytes / µs; the copy: 2900 GB/s
        "1. `fast_exp,vec_ld(width=4)`: 13000 cycles, 1.54x the baseline, 1173 GB/s, "
        "40 % of the copy",
        "2. `vec_ld(width=4),cache_ld(policy=cs)`: 14000 cycles, 1.43x the baseline, "
        "1089 GB/s, 38 % of the copy",
        "3. `vec_ld(width=4)`: 15000 cycles, 1.33x the baseline, 1017 GB/s, 35 % of the copy",
        "4. `fast_exp`: 18000 cycles, 1.11x the baseline, 847 GB/s, 29 % of the copy",
        "5. `cache_ld(policy=cs)`: 19500 cycles, 1.03x the baseline, 782 GB/s, 27 % of the copy"]
    assert search["evaluated"] == 8 and search["valid"] == 7 and not search["static"]
    genes = search["genes"]
    assert genes[0].startswith("`fast_exp`: in 2 variants; best 1.54x, median 1.32x")
    assert "`vec_ld(width=4)`: in 3 variants; best 1.54x, median 1.43x; without it: " \
           "median 1.01x of 4" in genes
    assert genes[-1] == "`ftz(scope=all)`: in 1 variant (1 failed); without it: median 1.11x of 7"
    assert [l.split("`")[1].split("(")[0] for l in search["transforms"]] == \
        list(transforms.registry())
    assert len(context.search_context(_known(spec), 20000, k=2)["top"]) == 2


@needs_ptxas
def test_prompt_renders_top_variants_gene_effects_and_what_transforms_do():
    spec = find_kernel("softmax")
    ctx = build_mutate_context(spec, Genome(), _m(spec, 20000), None, None, None, [], [],
                               known=_known(spec))
    user = PromptSet().render("mutate", **ctx)
    assert "# Top 5 variants of this kernel so far (of 7 correct, 8 evaluated)" in user
    assert "1. `fast_exp,vec_ld(width=4)`: 13000 cycles, 1.54x the baseline" in user
    assert "- `vec_ld(width=4)`: in 3 variants; best 1.54x" in user
    assert "# What the transform genes already do" in user
    # only the transforms with a gene that changes this kernel: softmax's loads are
    # strided, so vec_ld has nothing to merge; cache_ld applies to every load
    assert "- `cache_ld(policy=" in user and "- `vec_ld(width=2|4)`" not in user
    assert "transforms that do not apply to this kernel left out)" in user
    assert "shared memory" in user and "algorithmic changes" in user


@needs_ptxas
def test_what_stays_the_same_for_a_kernel_comes_first_for_the_prompt_cache():
    """The kernel's facts and the transforms that apply head the user message, then the
    current PTX, then what changes from call to call: two variants' prompts share the
    prefix up to their PTX, and a prompt with more results only differs after it."""
    spec = find_kernel("softmax")
    prompts = PromptSet()

    def user(genome, known):
        ctx = build_mutate_context(spec, parse_inline(genome) if genome else Genome(),
                                   _m(spec, 20000), None, None, None, [], [], known=known)
        return prompts.render("mutate", **ctx)

    a, b = user("", _known(spec)), user("fast_rcp", _known(spec))
    c = user("", _known(spec, results=[("", 20000), ("cache_ld(policy=cg)", 19000)]))
    order = [a.index(h) for h in ("# Kernel `softmax`", "# What the transform genes already do",
                                  "# Current PTX", "# The current variant", "# Performance so far",
                                  "# Top ", "# Task")]
    assert order == sorted(order), order
    ptx_at = a.index("# Current PTX")
    assert a[:ptx_at] == b[:ptx_at] == c[:ptx_at]
    assert a[:a.index("# The current variant")] == c[:c.index("# The current variant")]


@needs_ptxas
def test_static_figures_are_labelled_static_estimates():
    spec = find_kernel("softmax")
    ctx = build_mutate_context(spec, Genome(), _m(spec, 20000, "static"), None, None, None,
                               [], [], known=_known(spec, timer="static"))
    user = PromptSet().render("mutate", **ctx)
    assert ctx["static"] and ctx["search"]["static"]
    assert "1. `fast_exp,vec_ld(width=4)`: 13000 cycles (static estimate), 1.54x" in user
    assert "cycles are static estimates, not measured" in user
    assert "baseline cycles / variant cycles, static estimates" in user
    assert "GB/s" not in user  # no GPU timed it: no throughput is claimed
    assert "20000 (static estimate, not measured)" in user and "not from a GPU" in user


def test_the_character_budget_holds():
    spec = find_kernel("softmax")
    many = [("", 20000)] + [(f"maxnreg(n={n}),cache_ld(policy={p})", 20000 - n)
                            for n in range(16, 256, 8) for p in ("ca", "cg", "cs", "nc")]
    known = _known(spec, results=many)
    for budget in (0, 300, 1500, 6000):
        s = context.search_context(known, 20000, budget)
        used = sum(len(l) + 1 for l in s["top"] + s["genes"])
        assert used <= budget
        assert s["top_left_out"] + s["genes_left_out"] > 0
        # the transform list is never cut: it is the same in every prompt on the kernel
        assert len(s["transforms"]) == len(transforms.registry()) and not s["transforms_left_out"]
    assert context.search_context(known, 20000, 0)["top"] == []
    small = context.search_context(known, 20000, 1500)
    assert len(small["top"]) == 5 and small["genes"]
    some = context.search_context(known, 20000, 1500, applicable={"maxnreg", "ftz"})
    assert [line.split("(")[0] for line in some["transforms"]] == ["`ftz", "`maxnreg"]
    assert some["transforms_left_out"] == len(transforms.registry()) - 2


@needs_ptxas
def test_the_rendered_prompt_stays_bounded(monkeypatch):
    import harness.sass

    monkeypatch.setattr(harness.sass, "disassemble", lambda cubin, timeout=60: None)  # speed
    spec = find_kernel("softmax")
    many = [("", 20000)] + [(f"maxnreg(n={n}),cache_ld(policy={p})", 20000 - n)
                            for n in range(16, 256, 8) for p in ("ca", "cg", "cs", "nc")]

    def length(known, budget):
        ctx = build_mutate_context(spec, Genome(), None, None, None, None, [], [],
                                   known=known, context_chars=budget)
        return len(PromptSet().render("mutate", **ctx))

    known = _known(spec, results=many)
    without = length(known, 0)  # no top variants, gene effects or transform list
    headers = 1200  # section titles and the fixed advice above the transform list
    assert without < length(known, 2000) <= without + 2000 + headers
    assert length(known, 6000) <= without + 6000 + headers
    assert without - length({}, 0) <= 600  # the memory lines: a fixed few


@needs_ptxas
def test_the_mutator_passes_the_search_results_into_the_prompt(llm_server, tmp_path,
                                                                monkeypatch):
    monkeypatch.setenv("EVO_TEST_KEY", "sk-test")
    llm_server.script([fake.text("no edit")])
    config = LlmConfig(rate=0.5, base_url=llm_server.base_url, api_key_env="EVO_TEST_KEY",
                       timeout=0.5, retries=1, cache=False)
    m = LlmMutator(config, tmp_path / "llm")
    spec = find_kernel("softmax")
    m.propose(spec, Genome(), SearchView(baseline=_m(spec, 20000), known=_known(spec)))
    user = llm_server.requests[0].body["messages"][-1]["content"]
    assert "1. `fast_exp,vec_ld(width=4)`: 13000 cycles, 1.54x the baseline" in user
    assert "% of the copy roofline" in user and m.context_chars == context.CONTEXT_CHARS
