"""The LLM operator with kernels searched at once ([run] jobs > 1): what a run asks and
keeps does not depend on timing. Against a real OpenAI-protocol server on 127.0.0.1 whose
answer depends on the prompt alone, three kernels one at a time and three at once send
the same prompts and end with the same checkpoints."""

from __future__ import annotations

import json
import re

import llm_server as fake
from conftest import needs_ptxas
from evo.cli import main
from llm_server import text

llm_server = fake.llm_server  # the fixture

KEY = "sk-test-0123456789abcdef"
KERNELS = ("gemm_tile_2x2x2", "gemm_tile_4x4x4", "gemm_tile_2x4x4")


def _answer(body: dict):
    """A patch from the prompt alone: the first plain f32 global load of the PTX shown
    gets the .ca cache operator (the same semantics); none left: no edit."""
    user = body.get("messages", [{}])[-1].get("content", "")
    ptx = user.split("```ptx\n", 1)[1].split("```", 1)[0] if "```ptx\n" in user else ""
    for line in ptx.splitlines():
        code = re.sub(r"^\d+\t", "", line)
        if re.match(r"\s*ld\.global\.f32\s", code):
            new = code.replace("ld.global.f32", "ld.global.ca.f32", 1)
            return text(f"METHOD: cache all loads\nRATIONALE: keep A in L1\n"
                        f"<<<<<<< SEARCH\n{code}\n=======\n{new}\n>>>>>>> REPLACE\n")
    return text("METHOD: nothing\nRATIONALE: every load is cached already")


def _run(tmp_path, server, jobs: int) -> tuple:
    folder = tmp_path / f"jobs{jobs}"
    folder.mkdir()
    config = folder / "evo.toml"
    config.write_text(f"""[run]
suite = {json.dumps(list(KERNELS))}
backend = "static"
pop = 5
seed = 4
jobs = {jobs}
store = "{folder / 'store.sqlite'}"

[llm]
rate = 0.5
concurrency = 2
base_url = "{server.base_url}"
api_key_env = "EVO_TEST_KEY"
timeout = 5.0
retries = 1
""")
    server.requests.clear()
    assert main(["run", "--config", str(config), "--generations", "3", "--out",
                 str(folder / "run"), "-q"]) == 0
    checkpoint = json.loads((folder / "run" / "checkpoint.json").read_text())
    kernels = {k: (v["known"], v["state"], v["evals"]) for k, v in checkpoint["kernels"].items()}
    counts = {k: checkpoint["llm"][k] for k in ("calls", "proposed", "applied", "assembled")}
    prompts = sorted(r.body["messages"][-1]["content"] for r in server.requests)
    methods = checkpoint["llm"]["state"]["methods"]["own"]
    return kernels, counts, prompts, methods


@needs_ptxas
def test_kernels_at_once_ask_and_keep_what_one_at_a_time_does(llm_server, tmp_path, monkeypatch):
    monkeypatch.setenv("EVO_TEST_KEY", KEY)
    llm_server.answer = _answer
    one = _run(tmp_path, llm_server, 1)
    three = _run(tmp_path, llm_server, 3)
    assert one[1]["proposed"] > 0 and one[1]["assembled"] > 0, one[1]  # the LLM took part
    assert set(one[0]) == set(KERNELS)
    assert one[2] == three[2]  # the same prompts, whatever the order they went in
    assert one[0] == three[0]  # the same searches: results, populations, RNG states
    assert one[1] == three[1] and one[3] == three[3]
    assert set(one[3]) <= set(KERNELS)  # method tallies are kept per kernel
