"""Training a gene policy (``evo.learn.policy``) from measured landscapes, with PyTorch.

Two stages, both against what was measured (each kernel's :class:`Landscape`: only moves
to a measured genome are open, so every reward is a measurement, none a guess):

1. **Behaviour cloning** of greedy's trajectories: at each state of greedy's path, the
   measured move greedy took (or STOP where no move gained more than ``STEP_COST``),
   cross-entropy over the moves that were measured there, the target smoothed
   (``SMOOTHING`` spread over them).
2. **GRPO**: per iteration, ``group`` rollouts per kernel sampled at temperature T
   (annealed from ``t_start`` to ``t_end``), mixed with a uniformly drawn move
   (``epsilon``: what cloning never showed gets tried); a rollout's reward is the best
   ln(baseline / cycles) along its path (the baseline's 0 included: a search keeps the
   fastest genome it measured, wherever the walk goes on), minus ``STEP_COST`` per gene
   and ``FAIL_COST`` where it ended at a variant that failed; advantages relative to the
   kernel's group (reward minus the group mean, over its spread); the clipped surrogate (``clip``) with a KL penalty (``beta``, the
   k3 estimator) to the cloned policy; ``epochs`` updates per batch. The surrogate's ratio
   is the policy's probability over its own before the update (a uniform move counts as
   the policy's: over the mixture's, the ratio of a move the policy thought unlikely
   starts near 0 and its gradient vanishes). The weights kept are those whose argmax
   rollouts scored best, checked every ``CHECK_EVERY`` iterations (the cloned ones among
   them), on a ``VALIDATION`` share of the kernels that GRPO leaves out (it is cloned from
   them): chosen on the kernels it trained on, GRPO beat the clone on 7 held-out kernels
   of 19 and lost on 7; chosen on kernels it did not train on, 9 and 1 (BENCHMARKS.md,
   session 18).

``train`` returns the policy file's data (plain JSON) with what training saw in
``trained``. PyTorch is an optional extra (``pip install 'evo-ptx[rl]'``); the policy it
writes runs without it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from evo.learn.policy import (FAILED, MAX_STEPS, POLICY_VERSION, STEP_COST, Landscape,
                              Policy, scaled)

SMOOTHING = 0.1
FAIL_COST = 0.05  # a rollout that ends at a failed variant: one measurement thrown away
CHECK_EVERY = 10  # GRPO iterations between scorings of the argmax rollout
VALIDATION = 0.25  # share of the kernels GRPO leaves out to choose its weights on (train)


def need_torch():
    try:
        import torch
    except ImportError:
        from evo.learn.policy import PolicyError

        raise PolicyError("training a policy needs PyTorch: pip install 'evo-ptx[rl]' "
                          "(a trained policy runs without it)") from None
    return torch


def landscapes_from_kb(kb: dict, exclude=()) -> list[Landscape]:
    """One landscape per (device, kernel) entry of a knowledge base, but the excluded
    kernels (leave-one-out) and those with nothing beyond the baseline measured."""
    out = [Landscape.from_kb_entry(e) for e in kb.get("kernels", []) if e["kernel"] not in exclude]
    return [land for land in out if len(land.values) > 1]


def blank_policy(landscapes: list[Landscape]) -> dict:
    """A policy file's data without layers: its features, their scaling, its vocabulary."""
    names = sorted({n for land in landscapes for n in land.features})
    vocab = sorted({k for land in landscapes for state in land.values for k in state})
    columns = [[scaled(n, land.features.get(n, 0.0)) for land in landscapes] for n in names]
    mean = [statistics.fmean(c) for c in columns]
    std = [max(statistics.pstdev(c), 1e-3) for c in columns]
    return {"version": POLICY_VERSION, "features": names, "mean": mean, "std": std,
            "vocab": vocab, "layers": []}


class _Prepared:
    """A landscape with its input rows and measured moves computed once per state."""

    def __init__(self, land: Landscape, encoder: Policy):
        self.land, self.encoder = land, encoder
        self._rows: dict = {}
        self._moves: dict = {}

    def row(self, state):
        if state not in self._rows:
            self._rows[state] = self.encoder.encode(self.land.features, [state])[0]
        return self._rows[state]

    def moves(self, state) -> dict:
        if state not in self._moves:
            self._moves[state] = self.land.moves(state, self.encoder.vocab)
        return self._moves[state]


def _net(torch, inputs: int, hidden: int, outputs: int):
    return torch.nn.Sequential(torch.nn.Linear(inputs, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, outputs))


def net_of(torch, policy: Policy):
    """The PyTorch network of a policy file's weights (as ``train`` wrote them)."""
    (w0, _), *_ = policy.layers
    net = _net(torch, w0.shape[1], w0.shape[0], policy.stop + 1)
    for layer, (w, b) in zip((m for m in net if isinstance(m, torch.nn.Linear)), policy.layers):
        layer.weight.data = torch.tensor(w, dtype=torch.float32)
        layer.bias.data = torch.tensor(b, dtype=torch.float32)
    return net


def _masked(torch, logits, masks):
    return logits.masked_fill(~masks, float("-inf"))


def _mask_row(moves: dict, size: int) -> list[bool]:
    row = [False] * size
    for i in moves:
        row[i] = True
    row[-1] = True  # STOP is always open
    return row


def clone(torch, net, kernels: list[_Prepared], epochs: int, lr: float) -> float:
    """Behaviour cloning of greedy's trajectories; returns the share of its steps the
    network's argmax then takes."""
    size = len(kernels[0].encoder.vocab) + 1
    rows, masks, actions = [], [], []
    for k in kernels:
        for state, action, moves in k.land.greedy(k.encoder.vocab):
            rows.append(k.row(state))
            masks.append(_mask_row(moves, size))
            actions.append(action)
    if not rows:
        return 0.0
    import numpy as np

    x = torch.tensor(np.array(rows), dtype=torch.float32)
    m = torch.tensor(masks)
    a = torch.tensor(actions)
    opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=1e-3)  # modest logits
    # Targets smoothed over the measured moves: a clone sure of greedy's move to 1e-20
    # leaves GRPO's clipped steps (20 % a batch) nothing to move.
    target = m.float() * SMOOTHING / m.float().sum(1, keepdim=True)
    target[torch.arange(len(a)), a] += 1 - SMOOTHING
    for _ in range(epochs):
        logp = torch.log_softmax(net(x).masked_fill(~m, -1e9), dim=1)
        loss = -(target * logp).sum(1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return float((_masked(torch, net(x), m).argmax(1) == a).float().mean())


def rollouts(torch, net, kernels: list[_Prepared], group: int, temperature: float, gen,
             greedy: bool = False, epsilon: float = 0.0) -> list[dict]:
    """``group`` rollouts per kernel, in lockstep (one forward pass per step): each a dict
    of its kernel's index, steps (row, mask, action, the policy's log-probability of it),
    end state, reward. ``greedy``: the argmax move, not a sample; ``epsilon``: the chance
    of a uniformly drawn open move (the policy alone rarely tries what it was not shown)."""
    import numpy as np

    size = len(kernels[0].encoder.vocab) + 1
    runs = [{"kernel": i, "state": (), "steps": [], "failed": False, "done": False,
             "path": {()}} for i in range(len(kernels)) for _ in range(group)]
    for _ in range(MAX_STEPS):
        live = [r for r in runs if not r["done"]]
        if not live:
            break
        moves = [{i: c for i, c in kernels[r["kernel"]].moves(r["state"]).items()
                  if c not in r["path"]} for r in live]  # no cycles, as in a search
        x = torch.tensor(np.array([kernels[r["kernel"]].row(r["state"]) for r in live]),
                         dtype=torch.float32)
        m = torch.tensor([_mask_row(mv, size) for mv in moves])
        with torch.no_grad():
            logp = torch.log_softmax(_masked(torch, net(x) / temperature, m), dim=1)
            p = logp.exp()
            if not greedy:  # mixed with a uniform open move, as a search samples
                p = (1 - epsilon) * p + epsilon * m.float() / m.float().sum(1, keepdim=True)
            picks = p.argmax(1) if greedy else torch.multinomial(p, 1, generator=gen)[:, 0]
        for r, mv, row, mask, a, lp in zip(live, moves, x, m, picks.tolist(), logp):
            r["steps"].append((row, mask, a, float(lp[a])))
            if a == size - 1:
                r["done"] = True
                continue
            r["state"] = mv[a]
            r["path"].add(mv[a])
            if kernels[r["kernel"]].land.values[r["state"]] <= FAILED:
                r["failed"], r["done"] = True, True
    for r in runs:
        moved = sum(1 for s in r["steps"] if s[2] != size - 1)
        best = max(kernels[r["kernel"]].land.values[s] for s in r["path"])
        r["reward"] = best - STEP_COST * moved - FAIL_COST * r["failed"]
    return runs


def grpo_step(torch, net, ref, opt, runs: list[dict], group: int, temperature: float,
              clip: float, beta: float, epochs: int) -> None:
    """One GRPO update from a batch of rollouts (module docstring)."""
    rows, masks, actions, old, adv, weight = [], [], [], [], [], []
    for start in range(0, len(runs), group):
        members = runs[start:start + group]
        rewards = [r["reward"] for r in members]
        mean, spread = statistics.fmean(rewards), statistics.pstdev(rewards)
        for r in members:
            a = (r["reward"] - mean) / (spread + 1e-4) if spread > 1e-9 else 0.0
            for row, mask, action, lp in r["steps"]:
                rows.append(row)
                masks.append(mask)
                actions.append(action)
                old.append(lp)
                adv.append(a)
                weight.append(1.0 / (len(r["steps"]) * len(runs)))
    if not rows:
        return
    x, m = torch.stack(rows), torch.stack(masks)
    a = torch.tensor(actions)[:, None]
    old_lp, advantage, w = (torch.tensor(v, dtype=torch.float32) for v in (old, adv, weight))
    with torch.no_grad():
        ref_lp = torch.log_softmax(_masked(torch, ref(x) / temperature, m), 1).gather(1, a)[:, 0]
    for _ in range(epochs):
        lp = torch.log_softmax(_masked(torch, net(x) / temperature, m), 1).gather(1, a)[:, 0]
        ratio = torch.exp(lp - old_lp)
        surrogate = torch.minimum(ratio * advantage,
                                  torch.clamp(ratio, 1 - clip, 1 + clip) * advantage)
        kl = torch.exp(ref_lp - lp) - (ref_lp - lp) - 1
        loss = -(w * (surrogate - beta * kl)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


def train(landscapes: list[Landscape], *, hidden: int = 64, clone_epochs: int = 400,
          iterations: int = 150, group: int = 8, batch: int = 64, lr: float = 1e-3,
          grpo_lr: float = 3e-3,
          clip: float = 0.2, beta: float = 0.01, epochs: int = 2, t_start: float = 1.5,
          t_end: float = 0.3, epsilon: float = 0.3, seed: int = 0,
          validation: float = VALIDATION,
          log: Callable[[str], None] | None = None) -> dict:
    """A policy file's data: cloned from greedy, then improved by GRPO (module docstring)
    on ``batch`` kernels a iteration (all where fewer), every choice from ``seed``.
    ``validation`` > 0: that share of the kernels (at least 5 in all) is cloned from but
    left out of GRPO, and the weights kept are those whose argmax rollouts score best on
    it, not on the kernels GRPO trained on."""
    import copy
    import random

    torch = need_torch()
    if not landscapes:
        from evo.learn.policy import PolicyError

        raise PolicyError("no kernel with measured genomes beyond its baseline to learn from")
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    pick = random.Random(seed)
    data = blank_policy(landscapes)
    encoder = Policy(data)
    kernels = [_Prepared(land, encoder) for land in landscapes]
    inputs = len(data["features"]) + len(data["vocab"]) + 1
    net = _net(torch, inputs, hidden, len(data["vocab"]) + 1)
    agree = clone(torch, net, kernels, clone_epochs, lr)
    ref = copy.deepcopy(net)
    scored = kernels
    if validation > 0 and len(kernels) >= 5:
        order = kernels[:]
        random.Random(seed + 1).shuffle(order)
        count = min(len(order) - 1, max(1, round(validation * len(order))))
        scored, kernels = order[:count], order[count:]
    before = _mean_reward(torch, net, scored, gen)
    # GRPO's last iterate is not always its best: every CHECK_EVERY iterations the argmax
    # rollouts on the training kernels are scored and the best weights kept (the cloned
    # ones included), so that training never ends worse than cloning on what it saw.
    best, kept = before, copy.deepcopy(net.state_dict())
    opt = torch.optim.Adam(net.parameters(), lr=grpo_lr)
    for it in range(iterations):
        t = t_start * (t_end / t_start) ** (it / max(1, iterations - 1))
        chosen = kernels if len(kernels) <= batch else pick.sample(kernels, batch)
        runs = rollouts(torch, net, chosen, group, t, gen, epsilon=epsilon)
        grpo_step(torch, net, ref, opt, runs, group, t, clip, beta, epochs)
        if (it + 1) % CHECK_EVERY == 0 or it + 1 == iterations:
            score = _mean_reward(torch, net, scored, gen)
            if score > best:
                best, kept = score, copy.deepcopy(net.state_dict())
            if log:
                log(f"GRPO {it + 1}/{iterations}: T {t:.2f}, samples' mean reward "
                    f"{statistics.fmean(r['reward'] for r in runs):+.4f}, one argmax rollout "
                    f"{score:+.4f} (best so far {best:+.4f})")
    net.load_state_dict(kept)
    after = best
    greedy = statistics.fmean(k.land.greedy_reward(k.encoder.vocab) for k in scored)
    data["layers"] = [{"w": _rounded(layer.weight.tolist()), "b": _rounded(layer.bias.tolist())}
                      for layer in net if isinstance(layer, torch.nn.Linear)]
    data["trained"] = {"kernels": len(landscapes), "seed": seed, "clone_agreement": round(agree, 4),
                       "one_rollout_reward": {"cloned": round(before, 5), "grpo": round(after, 5),
                                              "greedy_on_the_same_data": round(greedy, 5)},
                       "iterations": iterations, "group": group,
                       "scored_on": "training" if scored is kernels else f"{len(scored)} held out"}
    return data


def _rounded(values):
    """Weights to 6 decimals: a third of the file, no change in what the policy picks."""
    if isinstance(values, list):
        return [_rounded(v) for v in values]
    return round(values, 6)


def _mean_reward(torch, net, kernels, gen) -> float:
    """The mean reward of the argmax rollout (one per kernel)."""
    return statistics.fmean(r["reward"] for r in rollouts(torch, net, kernels, 1, 1.0, gen,
                                                          greedy=True))


def summary(data: dict) -> str:
    t = data.get("trained", {})
    r = t.get("one_rollout_reward", {})
    on = t.get("scored_on", "training")
    where = "the kernels trained on" if on == "training" else f"the {on.split()[0]} GRPO left out"
    return (f"{t.get('kernels', '?')} kernels, {len(data['vocab'])} genes; one argmax rollout's "
            f"mean reward on {where}: cloned {r.get('cloned', math.nan):+.4f}, after GRPO "
            f"{r.get('grpo', math.nan):+.4f} (greedy on the same measurements "
            f"{r.get('greedy_on_the_same_data', math.nan):+.4f}); cloning agreement "
            f"{100 * t.get('clone_agreement', 0):.0f} %")


class BenchPolicies:
    """The policy file ``evo bench``'s policy arms use for each kernel (``--policy
    loo|FILE``). ``loo``: one trained for that kernel from ``sources`` (stores or priors
    files; default the priors shipped with evo) without its own results, written to
    ``folder/KERNEL.json`` once and reused (a bench split over calls trains it once). A
    file: that file for every kernel (say where its kernels came from: a policy trained
    on the kernel under test has seen its answers)."""

    def __init__(self, setting: str, folder, sources=(), iterations: int = 150):
        from pathlib import Path

        from evo.learn.source import SHIPPED

        self.setting, self.folder = setting, Path(folder)
        self.sources = [Path(s) for s in sources] or [SHIPPED]
        self.iterations = iterations
        self._kb = None
        if setting == "loo":
            need_torch()  # before any search: a bench that cannot train says so at once

    def describe(self) -> str:
        if self.setting != "loo":
            return f"the policy file {self.setting} for every kernel"
        return (f"leave-one-out: a policy per kernel trained without its results, from "
                f"{', '.join(str(s) for s in self.sources)}")

    def prepare(self, kernels: list[str], log=print, processes: int | None = None) -> None:
        """Train the leave-one-out policies not yet in the folder, one process per kernel
        at once (each PyTorch on one thread): a bench's searches then only read files."""
        import concurrent.futures
        import multiprocessing
        import os

        todo = [k for k in kernels if self.setting == "loo"
                and not (self.folder / f"{k}.json").is_file()]
        if not todo:
            return
        workers = max(1, min(len(todo), processes or (os.cpu_count() or 2) // 2))
        log(f"training {len(todo)} leave-one-out policies, {workers} at once")
        with concurrent.futures.ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            for line in pool.map(_train_one, [(self, k) for k in todo]):
                log(line)

    def file_for(self, kernel: str, log=print) -> str:
        if self.setting != "loo":
            return self.setting
        from evo.learn import policy
        from evo.learn.source import kb_from_paths

        path = self.folder / f"{kernel}.json"
        if not path.is_file():
            if self._kb is None:
                self._kb = kb_from_paths(self.sources, rows=0)
            data = train(landscapes_from_kb(self._kb, {kernel}), iterations=self.iterations)
            data["trained"]["exclude"] = [kernel]
            policy.save(data, path)
            log(f"{kernel}: policy trained without it ({summary(data)})")
        return str(path)


def _train_one(job) -> str:
    """``BenchPolicies.prepare``'s work in one process: one kernel's policy."""
    policies, kernel = job
    need_torch().set_num_threads(1)
    lines = []
    policies.file_for(kernel, lines.append)
    return "; ".join(lines)
