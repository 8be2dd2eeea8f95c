"""``evo.toml``: typed, strictly validated configuration.

The file has one table per dataclass below, and one per strategy that has options (its
module's ``Options``, ``evo.strategies``). Every key is checked: an unknown key, a
wrong type or an out-of-range value is one ``ConfigError`` naming the file, the key and
(for unknown keys) the closest valid key. CLI flags override file values through
``Config.override``; the resolved config is written into the run as TOML by ``dumps``,
the one serializer (the same code reads it back on resume).
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field, fields, make_dataclass, replace
from pathlib import Path
from typing import Any, get_type_hints

from genomes.errors import EvoError
from harness.backends import BACKENDS  # each list of names has one owner, re-exported here
from harness.backends.cluster import COMPILE_ON

from evo import strategies
from evo.options import opt as _opt
from evo.strategies import NAMES as STRATEGIES


class ConfigError(EvoError):
    """A bad evo.toml or CLI override."""


@dataclass(frozen=True)
class RunConfig:
    suite: list = _opt(["gemm_tile_4x6x8"], doc="kernel names or glob patterns",
                       item=(str, None, "kernel names or glob patterns (non-empty strings)"))
    strategy: str = _opt("evolve", choices=STRATEGIES)
    generations: int = _opt(9, lo=1, hi=100000)
    pop: int = _opt(5, lo=1, hi=10000)
    max_evals: int = _opt(0, lo=0, doc="evaluations per kernel; 0 = no cap")
    budget_evals: int = _opt(0, lo=0, doc="evaluations for all kernels together, split by "
                                          "their share of the step (capture folders: "
                                          "evo.model.budget); 0 = off, max_evals applies")
    budget_minutes: float = _opt(0.0, lo=0.0, doc="wall minutes for the run's searches from "
                                 "its start (or resume): past them each search ends after "
                                 "its generation (one started later measures its first); "
                                 "what fits depends on the machine; 0 = off")
    seed: int = _opt(1, lo=0)
    backend: str = _opt("auto", choices=BACKENDS)
    gpus: list = _opt([0], doc="GPU ids: one worker per GPU",
                      item=(int, 0, "GPU ids (integers >= 0)"))
    store: str = _opt("runs/store.sqlite", doc="measurement store shared across runs")
    device: str = _opt("", doc="device name for the replay backend ('' = the only one)")
    confirm: bool = _opt(True, doc="after each kernel, measure its baseline and best again, "
                                   "back to back, past the store (gpu backend)")
    exact_slack: float = _opt(0.01, lo=-1.0, hi=1.0,
                              doc="keep a variant whose outputs equal the baseline's bit for "
                                  "bit over a faster one that rounds differently (fast-math "
                                  "genes) when it is at most this much slower: 0.01 = 1 %; "
                                  "-1 = never (gpu backend; evo.exact)")
    jobs: int = _opt(0, lo=0, hi=256, doc="kernels searched at once (each in its own thread; "
                                          "results do not depend on it); 0 = four per GPU or "
                                          "cluster worker (one with [llm] ncu_every on)")
    caches: str = _opt("spec", choices=("spec", "warm", "cold"),
                       doc="the L2 when timing: each spec's own choice, or warm (launches "
                           "reuse their data) or cold (every launch reads from DRAM) for all")
    priors: str = _opt("auto", doc="what other kernels' results say (evo.learn): auto (the "
                                   "priors shipped with evo and this store), none (a cold "
                                   "start), or a priors file or store path")


@dataclass(frozen=True)
class TimingConfig:
    check_sets: int = _opt(5, lo=1, hi=100, doc="fresh random input sets per candidate")
    warmup: int = _opt(10, lo=0)
    min_reps: int = _opt(30, lo=3)
    max_reps: int = _opt(1000, lo=3)
    target_rel_sem: float = _opt(0.005, lo=0.0, hi=1.0)
    timeout_s: float = _opt(10.0, lo=0.1, doc="per candidate, on the GPU")


@dataclass(frozen=True)
class ClusterConfig:
    address: str = _opt("", doc="measure on a Dask cluster: local or local:N (worker processes "
                                "here, one per GPU by default), or a scheduler's tcp://HOST:PORT; "
                                "'' = this machine's GPUs ([run] gpus)")
    compile: str = _opt("auto", choices=COMPILE_ON,
                        doc="where ptxas runs: on the workers' hosts, on this (driver) host, or "
                            "auto (driver for a local cluster, workers for a scheduler address)")


@dataclass(frozen=True)
class LlmConfig:
    """``[llm]``: the endpoint, what each request carries, and the LLM's budget.

    Each request sends ``model`` and the messages, and, unless switched off:
    ``temperature`` (a negative value sends none: the endpoint's default, all that OpenAI's
    reasoning models accept), ``max_tokens`` under the field name ``max_tokens_field``
    (``max_tokens`` for vLLM, llama.cpp and OpenAI chat models; ``max_completion_tokens``
    for OpenAI's reasoning models; ``max_tokens = 0`` sends none), and every field of the
    ``extra`` table as it is, e.g. ``extra = {reasoning_effort = "low"}`` or a
    ``[llm.extra]`` table. An endpoint that rejects one of these fields (HTTP 400 naming
    it) stops the run with one line saying which and what to set instead.
    """

    rate: float = _opt(0.0, lo=0.0, hi=1.0,
                       doc="probability that a child is mutated by the LLM (0 = never)")
    base_url: str = _opt("", doc="OpenAI-compatible endpoint ('' = the openai default)")
    model: str = _opt("gpt-4o-mini")
    api_key_env: str = _opt("OPENAI_API_KEY", doc="environment variable holding the key")
    temperature: float = _opt(0.7, lo=-1.0, hi=2.0,
                              doc="sampling temperature; negative (-1) = not sent, the "
                                  "endpoint's default (reasoning models accept no other)")
    max_tokens: int = _opt(4096, lo=0, doc="cap on each answer's tokens (0 = not sent)")
    max_tokens_field: str = _opt("max_tokens", choices=("max_tokens", "max_completion_tokens"),
                                 doc="the request field that carries max_tokens: max_tokens "
                                     "(vLLM, llama.cpp, OpenAI chat models) or "
                                     "max_completion_tokens (OpenAI reasoning models)")
    extra: dict = field(default_factory=dict, metadata={
        "doc": "more request fields, sent as they are (e.g. {reasoning_effort = \"low\"})"})
    timeout: float = _opt(120.0, lo=0.1, doc="seconds per request")
    retries: int = _opt(3, lo=0, hi=20, doc="retries on 429, 5xx and timeouts")
    concurrency: int = _opt(4, lo=1, hi=64, doc="requests in flight at once (a generation's "
                                                "LLM children are asked together)")
    max_calls: int = _opt(200, lo=0, doc="LLM calls per run at most")
    price_in: float = _opt(0.0, lo=0.0, doc="cost per 1M prompt tokens (0 = not tracked)")
    price_out: float = _opt(0.0, lo=0.0, doc="cost per 1M completion tokens")
    max_cost: float = _opt(0.0, lo=0.0, doc="no new LLM call once the run's spend reaches "
                                            "this, from price_in and price_out (requests "
                                            "already in flight finish; 0 = no cap)")
    prompt_dir: str = _opt("", doc="folder with your own prompt templates ('' = built-in)")
    cache: bool = _opt(True, doc="keep every answer, per prompt and draw, so that a resumed "
                                 "run replays its answers instead of asking again")
    history_chars: int = _opt(3000, lo=0, hi=100000,
                              doc="characters of the mutate prompt that quote the kernel's "
                                  "earlier LLM patches and their outcomes (0 = none)")
    explore: float = _opt(0.0, lo=0.0, hi=1.0,
                          doc="share of LLM mutations asked in explore mode: little context "
                              "(no top variants, gene effects or history) and a request for "
                              "a bold structural change (0 = always the full context)")
    crossover: float = _opt(0.0, lo=0.0, hi=1.0,
                            doc="share of LLM calls that show two parents and ask for a patch "
                                "combining their ideas (0 = none)")
    ncu_every: int = _opt(0, lo=0, hi=1000,
                          doc="on a GPU machine with Nsight Compute: profile the kernel's "
                              "current best with ncu before every Nth LLM call on it and "
                              "quote throughput, hit rates, occupancy and top stalls in the "
                              "prompt (0 = never)")
    context_chars: int = _opt(6000, lo=0, hi=100000,
                              doc="characters of the mutate prompt for the top variants, "
                                  "per-gene effects and what the transform genes do (0 = none)")

    #: ``extra`` keys that other settings own, and what to set instead.
    RESERVED = {"model": "[llm] model", "messages": "the prompt templates",
                "temperature": "[llm] temperature", "max_tokens": "[llm] max_tokens",
                "max_completion_tokens": "[llm] max_tokens and max_tokens_field",
                "stream": "nothing (answers are read whole)"}

    class Table(dict):
        """``extra`` as a dict whose ``repr`` is a TOML inline table, so that
        ``evo.config.dumps`` writes it into a run's config.toml and reads it back."""

        def __repr__(self) -> str:
            bare = lambda k: k and all(c.isascii() and (c.isalnum() or c in "-_") for c in k)
            return "{" + ", ".join(f"{k if bare(k) else _toml(k)} = {_toml(v)}"
                                   for k, v in self.items()) + "}"

    def __post_init__(self):
        if self.max_cost > 0 and self.price_in <= 0 and self.price_out <= 0:
            raise ConfigError("[llm] max_cost needs the prices it is counted in: set price_in "
                              "and price_out (per 1M tokens), or max_cost = 0")
        if 0 < self.max_tokens < 16:
            raise ConfigError(f"[llm] max_tokens must be 0 (not sent) or >= 16, "
                              f"got {self.max_tokens!r}")
        for key in self.extra:
            if key in self.RESERVED:
                raise ConfigError(f"[llm] extra: {key!r} is not allowed there; "
                                  f"set {self.RESERVED[key]} instead")
        object.__setattr__(self, "extra", self._plain(self.extra, "[llm] extra"))

    @classmethod
    def _plain(cls, value: Any, where: str) -> Any:
        """``value`` checked to be what a JSON request body can carry (strings, numbers,
        booleans, arrays, tables), tables as sorted ``Table``s (a stable config hash)."""
        if isinstance(value, dict):
            return cls.Table((str(k), cls._plain(value[k], f"{where}.{k}"))
                             for k in sorted(value, key=str))
        if isinstance(value, list):
            return [cls._plain(x, f"{where}[{i}]") for i, x in enumerate(value)]
        if isinstance(value, (str, int, float, bool)):
            return value
        raise ConfigError(f"{where} must hold strings, numbers, booleans, arrays or tables, "
                          f"got {value!r}")


class _Sections:
    """What every Config does, whatever its tables (``Config`` below adds them)."""

    def override(self, section: str, **values: Any) -> Config:
        """A copy with some keys of one section replaced (CLI flags); values are checked."""
        current = getattr(self, section)
        table = {f.name: getattr(current, f.name) for f in fields(current)}
        table.update({k: v for k, v in values.items() if v is not None})
        return replace(self, **{section: _build(type(current), table, f"[{section}]", "<cli>")})

    def to_dict(self) -> dict:
        return {f.name: {g.name: getattr(getattr(self, f.name), g.name)
                         for g in fields(getattr(self, f.name))} for f in fields(self)}


def _table(name: str, cls: type):
    return (name, cls, field(default_factory=cls))


# One table per section: the run's, each strategy's own (``Options`` of its module, in
# ``evo.strategies``: a new strategy's table needs no line here), then the rest.
Config = make_dataclass("Config", [
    _table("run", RunConfig),
    *(_table(name, cls) for name, cls in strategies.options().items()),
    _table("timing", TimingConfig), _table("llm", LlmConfig), _table("cluster", ClusterConfig),
], bases=(_Sections,), frozen=True)
Config.__module__ = __name__
Config.__doc__ = "The whole configuration: one frozen dataclass per table of evo.toml."


def load(path: str | Path | None) -> Config:
    """Read and validate a config file; ``None`` or a missing default file gives defaults."""
    if path is None:
        return Config()
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err})") from None
    return from_dict(data, str(path))


def from_dict(data: dict, source: str = "<config>") -> Config:
    sections = {f.name: f for f in fields(Config)}
    built = {}
    for name, table in data.items():
        if name not in sections:
            raise ConfigError(f"{source}: unknown section [{name}]{_closest(name, sections)}")
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: [{name}] must be a table")
        built[name] = _build(sections[name].type, table, f"[{name}]", source)
    return Config(**built)


def _build(cls, table: dict, where: str, source: str):
    hints = get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    values = {}
    for key, value in table.items():
        if key not in known:
            raise ConfigError(f"{source}: unknown key {key!r} in {where}{_closest(key, known)}")
        values[key] = _check(key, value, hints[key], known[key].metadata, where, source)
    return cls(**values)


def _check(key: str, value: Any, kind: type, meta, where: str, source: str) -> Any:
    name = f"{where} {key}"
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is list and isinstance(value, (str, int)):
        value = [value]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{source}: {name} must be {kind.__name__}, got {value!r}")
    if kind is list and meta.get("item"):
        item, lo, what = meta["item"]
        for v in value:
            if (not isinstance(v, item) or isinstance(v, bool) or (item is str and not v.strip())
                    or (lo is not None and v < lo)):
                raise ConfigError(f"{source}: {name} must be a list of {what}, got {v!r} "
                                  f"in {value!r}")
        return value
    if meta.get("choices") and value not in meta["choices"]:
        raise ConfigError(f"{source}: {name} must be one of {', '.join(meta['choices'])}, "
                          f"got {value!r}{_closest(str(value), meta['choices'])}")
    lo, hi = meta.get("lo"), meta.get("hi")
    if lo is not None and value < lo or hi is not None and value > hi:
        span = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise ConfigError(f"{source}: {name} must be {span}, got {value!r}")
    return value


def _closest(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def dumps(config: Config) -> str:
    """The config as TOML (the resolved config saved in a run folder)."""
    lines = []
    for section, table in config.to_dict().items():
        lines.append(f"[{section}]")
        lines.extend(f"{k} = {_toml(v)}" for k, v in table.items())
        lines.append("")
    return "\n".join(lines)


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
            "\r": "\\r"}


def _escape(ch: str) -> str:
    """One character inside a TOML basic string (control characters may not appear raw)."""
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    return f"\\u{ord(ch):04x}" if ord(ch) < 32 or ord(ch) == 127 else ch


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):  # a TOML basic string: a newline in it must not end the line
        return '"' + "".join(_escape(ch) for ch in value) + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)

