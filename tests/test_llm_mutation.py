"""LLM mutation through the real openai client and a scripted loopback server, and
`evo run --llm-rate` end to end (static backend): patch genes evolve, checkpoint and resume.
"""

from __future__ import annotations

import json

import pytest

import llm_server as fake
from conftest import needs_ptxas
from evo.config import LlmConfig
from evo.llm.mutation import LlmMutator, SearchView, normalize_method
from genomes.genome import Genome, PatchGene, apply_genome, parse_inline
from harness.kernels.suite import find_kernel
from llm_server import hang, malformed, status, text

llm_server = fake.llm_server  # the fixture
KEY = "sk-test-0123456789abcdef"
KERNEL = "gemm_tile_2x4x4"

GOOD = """I will vectorize the first two loads of A.
```
<<<<<<< SEARCH
	ld.global.f32 	%f1, [%rd4];
	ld.global.f32 	%f2, [%rd4+4];
=======
	ld.global.v2.f32 	{%f1, %f2}, [%rd4];
>>>>>>> REPLACE
```
METHOD: Vectorize loads!
RATIONALE: one 8-byte load instead of two.
"""

SHIFTED = """```diff
--- a/kernel.ptx
+++ b/kernel.ptx
@@ -57,3 +57,3 @@
 	ld.global.f32 	%f7, [%rd4+24];
-	ld.global.f32 	%f8, [%rd4+28];
+	ld.global.nc.f32 	%f8, [%rd4+28];
 	cvta.to.global.u64 	%rd6, %rd3;
```
METHOD: read-only cache
RATIONALE: A is never written.
"""

NOT_APPLYING = """```diff
@@ -10,2 +10,2 @@
-	ld.global.f32 	%f99, [%rd42+4000];
+	ld.global.nc.f32 	%f99, [%rd42+4000];
```
METHOD: imaginary
RATIONALE: none
"""

BREAKS_PTXAS = """```
<<<<<<< SEARCH
	ld.global.f32 	%f1, [%rd4];
=======
	ld.global.f32 	%f1, [%rd4999];
>>>>>>> REPLACE
```
METHOD: broken
"""


def mutator(server, tmp_path, monkeypatch, **overrides) -> LlmMutator:
    monkeypatch.setenv("EVO_TEST_KEY", KEY)
    values = dict(rate=0.5, base_url=server.base_url, api_key_env="EVO_TEST_KEY",
                  timeout=0.5, retries=1, cache=False)
    cfg = LlmConfig(**{**values, **overrides})
    m = LlmMutator(cfg, tmp_path / "llm")
    m.client._sleep = lambda s: None  # backoff waits are not what these tests measure
    return m


def propose(m: LlmMutator, genome: Genome = Genome()):
    return m.propose(find_kernel(KERNEL), genome, SearchView())


@needs_ptxas
@pytest.mark.parametrize("script,expect,counts,requests", [
    ([text(GOOD)], "patch", {"proposed": 1, "applied": 1, "assembled": 1}, 1),
    ([text(SHIFTED)], "patch", {"proposed": 1, "applied": 1, "assembled": 1}, 1),
    ([text(NOT_APPLYING), text(GOOD)], "patch", {"proposed": 1, "repairs": 1, "applied": 1}, 2),
    ([text(BREAKS_PTXAS), text(GOOD)], "patch", {"repairs": 1, "assembled": 1}, 2),
    ([text(NOT_APPLYING), text("Sorry, I cannot.")], None, {"proposed": 1, "repairs": 1}, 2),
    ([text("Just use fewer registers, it will be faster.")], None, {"no_patch": 1}, 1),
    ([malformed()], None, {"call_failed": 1}, 1),
    ([status(429, {"error": "slow down"}), text(GOOD)], "patch", {"proposed": 1}, 2),
    ([hang(3), hang(3)], None, {"call_failed": 1}, 2),
], ids=["good", "shifted-lines", "no-match-then-repair", "ptxas-error-then-repair",
        "repair-fails", "prose", "malformed-json", "429-then-ok", "hang"])
def test_each_reply_ends_as_specified(llm_server, tmp_path, monkeypatch, script, expect,
                                      counts, requests):
    llm_server.script(script)
    m = mutator(llm_server, tmp_path, monkeypatch)
    child = propose(m)
    if expect is None:
        assert child is None
    else:
        assert isinstance(child.genes[-1], PatchGene)
        applied = apply_genome(find_kernel(KERNEL).ptx_text(), child)
        assert applied.outcomes[-1].status == "applied"
    for key, value in counts.items():
        assert m.counts[key] == value, (key, dict(m.counts))
    assert len(llm_server.requests) == requests


@needs_ptxas
def test_mutate_prompt_shows_the_current_genome_and_ptx(llm_server, tmp_path, monkeypatch):
    llm_server.script([text(GOOD)])
    m = mutator(llm_server, tmp_path, monkeypatch)
    propose(m, parse_inline("maxnreg(n=64)"))
    user = llm_server.requests[0].body["messages"][-1]["content"]
    assert ".maxnreg 64" in user and "ld.global.f32" in user


def test_method_labels_normalize():
    assert normalize_method("  Vectorize loads! (v2) ") == "vectorize loads v2"
    assert normalize_method("") == "unlabelled"


def write_config(tmp_path, server) -> str:
    path = tmp_path / "evo.toml"
    path.write_text(f"""[run]
suite = ["{KERNEL}"]
backend = "static"
pop = 6
# The scripted answers (GOOD first) fit a parent whose first load of A is untouched: which
# parent the first call gets follows from the seed's draws.
seed = 3
store = "{tmp_path / 'store.sqlite'}"

[llm]
rate = 0.3
base_url = "{server.base_url}"
api_key_env = "EVO_TEST_KEY"
timeout = 1.0
retries = 1
""")
    return str(path)


@needs_ptxas
def test_run_with_llm_rate_evolves_patch_genes_and_resumes(llm_server, tmp_path, monkeypatch):
    from evo.cli import main

    monkeypatch.setenv("EVO_TEST_KEY", KEY)
    monkeypatch.chdir(tmp_path)
    llm_server.default = fake.text(SHIFTED)
    llm_server.script([text(GOOD), malformed(), text("no diff here"), text(NOT_APPLYING)])
    config = write_config(tmp_path, llm_server)
    run_dir = tmp_path / "run"
    # Generation 2 is the first that mutates: its whole offspring is the population then.
    assert main(["run", "--config", config, "--generations", "2", "--out", str(run_dir),
                 "-q"]) == 0
    first = json.loads((run_dir / "checkpoint.json").read_text())
    patched = [ind for ind in first["kernels"][KERNEL]["state"]["population"]
               if any("patch" in g for g in ind["genome"]["genes"])]
    assert patched, "the population holds patch genes"
    assert first["llm"]["proposed"] >= 1 and first["llm"]["calls"] >= 1
    # Resume to 5 generations: the patch genes come back from the checkpoint intact.
    assert main(["run", "--resume", str(run_dir), "--generations", "5", "-q"]) == 0
    final = json.loads((run_dir / "checkpoint.json").read_text())
    assert final["kernels"][KERNEL]["state"]["generation"] == 5
    for ind in final["kernels"][KERNEL]["state"]["population"]:
        genome = Genome.from_json(ind["genome"])  # every gene, patches too, reads back
        outcomes = apply_genome(find_kernel(KERNEL).ptx_text(), genome).outcomes
        assert len(outcomes) == len(genome.genes)
        assert all(o.status != "error" for o in outcomes), outcomes  # no gene broke on reading back
    assert final["llm"]["calls"] >= first["llm"]["calls"]
    report = (run_dir / "report.md").read_text()
    assert "patches:" in report and "proposed" in report
    assert main(["plot", str(run_dir)]) == 0  # the funnel drawn beside the fitness curves
    assert (run_dir / "plots" / "llm_funnel.png").is_file()
    # The key is sent to the server but never written anywhere in the run folder.
    assert any(KEY in r.headers.get("authorization", "") for r in llm_server.requests)
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path


@needs_ptxas
def test_a_wrong_model_stops_the_run_with_one_line_and_a_failing_status(llm_server, tmp_path,
                                                                         monkeypatch, capsys):
    """An endpoint answering 404 to every call (a wrong model name) used to leave every
    child unpatched while the run went on and exited 0."""
    from evo.cli import main

    monkeypatch.setenv("EVO_TEST_KEY", KEY)
    monkeypatch.chdir(tmp_path)
    llm_server.default = fake.status(404, {"error": {"message": "model not found"}})
    code = main(["run", "--config", write_config(tmp_path, llm_server), "--generations", "3",
                 "--out", str(tmp_path / "run"), "-q"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "refuses the run: no such model or endpoint" in err and "HTTP 404" in err
    assert len(llm_server.requests) == 1  # stopped at the first answer, no retries
    assert (tmp_path / "run" / "checkpoint.json").is_file()  # the first generation is kept


def test_a_model_the_endpoint_does_not_serve_stops_the_run_before_any_work(
        llm_server, tmp_path, monkeypatch, capsys):
    from evo.cli import main

    monkeypatch.setenv("EVO_TEST_KEY", KEY)
    monkeypatch.chdir(tmp_path)
    llm_server.models = ["qwen3-8b"]
    code = main(["run", "--config", write_config(tmp_path, llm_server), "--generations", "2",
                 "--out", str(tmp_path / "run"), "-q"])
    assert code == 2 and "does not serve model" in capsys.readouterr().err
    assert llm_server.requests == []  # no completion asked
    assert not (tmp_path / "run" / "checkpoint.json").exists()  # and nothing evaluated


def test_missing_key_is_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    from evo.cli import main

    monkeypatch.delenv("EVO_NO_SUCH_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    code = main(["run", "--kernel", KERNEL, "--backend", "static", "--llm-rate", "0.5",
                 "--config", str(_cfg_with_key_var(tmp_path)), "--out", str(tmp_path / "r")])
    assert code == 2
    assert "EVO_NO_SUCH_KEY" in capsys.readouterr().err


def _cfg_with_key_var(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text('[llm]\napi_key_env = "EVO_NO_SUCH_KEY"\nbase_url = "http://127.0.0.1:9/v1"\n')
    return path


@needs_ptxas
def test_explore_mode_leaves_the_search_history_out(llm_server, tmp_path, monkeypatch):
    llm_server.script([text(GOOD), text(GOOD)])
    m = mutator(llm_server, tmp_path, monkeypatch)
    m.history.add(KERNEL, "cache_ld(policy=cs)", "gate", "wrong result: 3 of 64 differ")
    spec = find_kernel(KERNEL)
    for mode in ("full", "explore"):
        assert m.propose(spec, Genome(), SearchView(recent_failures=["vec_st: ptxas error"]),
                         mode) is not None
    full, explore = (r.body["messages"][-1]["content"] for r in llm_server.requests)
    assert "wrong result: 3 of 64 differ" in full and "vec_st: ptxas error" in full
    assert "Be bold" not in full
    assert "wrong result" not in explore and "ptxas error" not in explore
    assert "Be bold" in explore and "ld.global.f32" in explore  # the kernel is all there
    assert m.counts["mode_full"] == 1 and m.counts["mode_explore"] == 1


@needs_ptxas
def test_crossover_prompt_shows_the_second_parent_and_patches_the_first(llm_server, tmp_path,
                                                                       monkeypatch):
    llm_server.script([text(GOOD)])
    m = mutator(llm_server, tmp_path, monkeypatch)
    first, second = parse_inline("maxnreg(n=64)"), parse_inline("vec_st(width=2)")
    known = {second.effective().dumps(): {"valid": True, "cycles": 812.0, "timer": "static"}}
    child = m.propose(find_kernel(KERNEL), first, SearchView(known=known), other=second)
    assert child is not None and child.genes[:-1] == first.genes
    assert isinstance(child.genes[-1], PatchGene)
    user = llm_server.requests[0].body["messages"][-1]["content"]
    assert "# The second parent: `vec_st(width=2)`" in user
    assert "Measured: 812 cycles, static estimate." in user
    assert "+\tst.global.v2.f32" in user  # its PTX, as a diff from the first parent's
    assert m.counts["crossover"] == 1 and m.stats()["crossover"] == 1


@needs_ptxas
def test_a_run_with_llm_crossover_sends_crossover_prompts(llm_server, tmp_path, monkeypatch):
    from evo.cli import main

    monkeypatch.setenv("EVO_TEST_KEY", KEY)
    monkeypatch.chdir(tmp_path)
    llm_server.default = fake.text(SHIFTED)
    config = write_config(tmp_path, llm_server)
    with open(config, "a") as f:
        f.write("crossover = 1.0\n")
    assert main(["run", "--config", config, "--generations", "2", "--out", "run", "-q"]) == 0
    prompts = [r.body["messages"][-1]["content"] for r in llm_server.requests]
    crossovers = [p for p in prompts if "# The second parent:" in p]
    # A child whose fellow offspring all share its genome has no mate; it is mutated instead
    # (evolve._llm_child), so not every prompt need be a crossover, but most are.
    assert len(crossovers) > len(prompts) / 2
    assert json.loads((tmp_path / "run" / "checkpoint.json").read_text())["llm"]["crossover"] \
        == len(crossovers)


@needs_ptxas
def test_lessons_the_llm_writes_come_back_in_its_next_prompts(llm_server, tmp_path,
                                                              monkeypatch):
    lesson = "LESSON: the A loads already hit L2; only fewer instructions help.\n"
    llm_server.script([text(lesson + GOOD), text(GOOD)])
    m = mutator(llm_server, tmp_path, monkeypatch)
    propose(m)
    propose(m)
    first, second = (r.body["messages"][-1]["content"] for r in llm_server.requests)
    assert "Lessons you wrote earlier" not in first
    assert "the A loads already hit L2; only fewer instructions help." in second
    again = mutator(llm_server, tmp_path, monkeypatch)
    again.restore(m.stats())  # a resumed run quotes the same lessons
    assert again.lessons == m.lessons == {KERNEL: [
        "the A loads already hit L2; only fewer instructions help."]}


@needs_ptxas
def test_the_operator_keeps_its_children_until_the_search_reports_them(llm_server, tmp_path,
                                                                      monkeypatch):
    from harness.record import Measurement

    llm_server.script([text(GOOD)])
    m = mutator(llm_server, tmp_path, monkeypatch)
    parent = Measurement(KERNEL, "static", True, cycles=1000.0, timer="static")
    child = m.propose(find_kernel(KERNEL), Genome(), SearchView(current=parent))
    key = child.effective().dumps()
    assert list(m.pending) == [(KERNEL, key)]
    m.measured(KERNEL, Genome().dumps(), parent)  # not its child: nothing counted
    assert m.counts["correct"] == 0
    m.measured(KERNEL, key, Measurement(KERNEL, "static", True, cycles=900.0, timer="static"))
    assert not m.pending and m.counts["correct"] == 1 and m.counts["faster"] == 1
    assert "faster" in " ".join(m.history.lines(KERNEL, 3000)[0])


def test_a_reasoning_models_draft_inside_think_is_not_the_patch():
    from evo.llm.mutation import _patch_gene, final_answer

    draft = "<<<<<<< SEARCH\n\tret;\n=======\n\tbogus;\n>>>>>>> REPLACE"
    final = "<<<<<<< SEARCH\n\tret;\n=======\n\t// final\n\tret;\n>>>>>>> REPLACE"
    answer = f"<think>First try:\n```\n{draft}\n```\nNo, better:</think>\nMETHOD: tidy\n```\n{final}\n```"
    gene = _patch_gene(answer)
    assert gene is not None and "// final" in gene.diff and "bogus" not in gene.diff
    assert gene.method == "tidy"
    assert _patch_gene(f"<think>only thinking, cut short:\n```\n{draft}\n```") is None
    assert final_answer("a<THINK>x</THINK>b<think>y") == "ab"


def test_an_answer_cut_at_max_tokens_is_not_told_to_the_model_as_a_format_error(
        llm_server, tmp_path, monkeypatch):
    llm_server.script([fake.Response("text", content="<think>still thinking about the",
                                     finish_reason="length")])
    m = mutator(llm_server, tmp_path, monkeypatch)
    assert m.propose(find_kernel(KERNEL), Genome(), SearchView()) is None
    assert m.counts["cut"] == 1 and m.counts["no_patch"] == 1
    assert m.history.to_json() == {}  # nothing quoted back to the model as its mistake
    assert m.stats()["cut"] == 1
    from evo.report import llm_lines
    assert "1 answers cut at [llm] max_tokens" in llm_lines(m.stats())[1]
