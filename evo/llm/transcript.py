"""What a run asked its LLM and what it answered, on disk (``evo.llm.client``'s files):

* ``<log_dir>/cache/<key>.json``: the answer to each request and draw (``cache_key``), which
  a resumed run replays instead of asking again;
* ``<log_dir>/NNNNN-<purpose>.json``: every exchange, numbered on from the highest number
  already there.

Everything written has the API key masked, should an endpoint or a prompt ever echo it.
``log_dir`` None keeps nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from evo.config import LlmConfig
from evo.llm.request import request_fields
from evo.rundir import write_atomic

MIN_SECRET_LEN = 8  # masking a 1-3 character "key" would garble ordinary text


class Transcript:
    """The reply cache and the exchange log of one client (module docstring)."""

    def __init__(self, log_dir: Path | None, config: LlmConfig, env: Mapping[str, str]):
        self.log_dir = log_dir
        self.config = config
        self._env = env
        self._seq: int | None = None

    def answer(self, key: str) -> dict | None:
        """The cached answer to request ``key``, or None (absent or damaged: ask again)."""
        if self.log_dir is None:
            return None
        try:
            entry = json.loads((self.log_dir / "cache" / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None
        return entry if isinstance(entry, dict) and isinstance(entry.get("text"), str) else None

    def keep(self, key: str, messages: list[dict], reply) -> None:
        """Cache ``reply`` (an ``LlmReply``) as the answer to request ``key``."""
        if self.log_dir is None:
            return
        entry = {"model": self.config.model, "fields": request_fields(self.config),
                 "draw": reply.draw, "messages": messages, "text": reply.text,
                 "prompt_tokens": reply.prompt_tokens,
                 "completion_tokens": reply.completion_tokens, "truncated": reply.truncated}
        write_atomic(self.log_dir / "cache" / f"{key}.json", self._dumps(entry))

    def log(self, purpose: str, messages: list[dict], reply, key: str) -> None:
        """One exchange as the next numbered file."""
        if self.log_dir is None:
            return
        if self._seq is None:
            self._seq = _last_seq(self.log_dir)  # a resumed run continues the numbering
        self._seq += 1
        outcome = "cached" if reply.cached else "ok" if reply.ok else "error"
        record = {"seq": self._seq, "purpose": purpose, "outcome": outcome,
                  "error": reply.error, "model": self.config.model,
                  "fields": request_fields(self.config), "draw": reply.draw,
                  "cache_key": key, "attempts": reply.attempts,
                  "seconds": round(reply.seconds, 4), "prompt_tokens": reply.prompt_tokens,
                  "completion_tokens": reply.completion_tokens, "messages": messages,
                  "text": reply.text}
        name = f"{self._seq:05d}-{_slug(purpose)}.json"
        write_atomic(self.log_dir / name, self._dumps(record))

    def mask(self, text: str) -> str:
        """``text`` with the API key masked."""
        secret = self._env.get(self.config.api_key_env, "")
        if len(secret) >= MIN_SECRET_LEN and secret in text:
            return text.replace(secret, "***")
        return text

    def _dumps(self, data: dict) -> str:
        return self.mask(json.dumps(data, indent=1, ensure_ascii=False))


def _slug(purpose: str) -> str:
    """``purpose`` made safe for a file name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", purpose).strip("._")[:40] or "call"


def _last_seq(log_dir: Path) -> int:
    """The highest NNNNN already used in ``log_dir`` (0 if none)."""
    seqs = [int(m.group(1)) for p in log_dir.glob("*.json")
            if (m := re.match(r"(\d{5,})-", p.name))]
    return max(seqs, default=0)
