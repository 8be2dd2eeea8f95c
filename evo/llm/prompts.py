"""Prompt templates: Jinja2 files rendered strictly into chat messages for the LLM.

Templates live in the repo's ``prompts/`` folder (``system.j2``, ``mutate.j2``,
``crossover.j2`` and ``repair.j2``; mutate and crossover share ``kernel_context.j2``). A user's ``[llm] prompt_dir`` is searched first, so one file placed
there overrides the built-in of the same name and the others still come from
``prompts/``.

Rendering is strict: an undefined variable, a missing template or a syntax error is a
``PromptError`` naming the template (and line) and the variable. A prompt that silently
lost a section would still "work" and quietly waste every LLM call of a run.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

from genomes.errors import EvoError

#: The built-in templates: ``<repo>/prompts``, two levels above this package.
def _builtin_dir() -> Path:
    """The repo's prompts/ (source checkouts and editable installs), else the copy a
    wheel installs under <prefix>/share/evo/prompts (pyproject's data-files)."""
    in_repo = Path(__file__).resolve().parents[2] / "prompts"
    return in_repo if in_repo.is_dir() else Path(sys.prefix) / "share" / "evo" / "prompts"


BUILTIN_DIR = _builtin_dir()

#: Kinds of user message that ``PromptSet.messages`` can build, one template each.
KINDS = ("mutate", "crossover", "repair")


class PromptError(EvoError):
    """A prompt template that cannot be found, parsed or rendered with its context."""


class PromptSet:
    """The prompt templates of one run: the user's ``prompt_dir`` first, then built-ins.

    ``prompt_dir`` may be None or "" (the config default) for built-ins only.
    """

    def __init__(self, prompt_dir: str | Path | None = None):
        import jinja2

        self.dirs: list[Path] = []
        if prompt_dir not in (None, ""):
            user = Path(prompt_dir).expanduser()
            if not user.is_dir():
                raise PromptError(f"prompt_dir {str(user)!r} is not a folder")
            self.dirs.append(user.resolve())
        self.dirs.append(BUILTIN_DIR)
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader([str(d) for d in self.dirs]),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            autoescape=False,  # the output is a prompt, not HTML: PTX has < and & in it
            trim_blocks=True,
            lstrip_blocks=True,
        )

    def source_of(self, name: str) -> Path | None:
        """The file that ``name`` resolves to (the user's copy wins), or None."""
        name = _template_name(name)
        return next((d / name for d in self.dirs if (d / name).is_file()), None)

    def render(self, name: str, /, **context: Any) -> str:
        """Render template ``name`` ("mutate" or "mutate.j2") with ``context``."""
        import jinja2

        name = _template_name(name)
        try:
            template = self.env.get_template(name)
            return template.render(**context)
        except jinja2.TemplateNotFound as err:
            where = " or ".join(str(d) for d in self.dirs)
            missing = err.name if err.name != name else name
            raise PromptError(f"prompt template {missing!r} not found in {where}") from None
        except jinja2.TemplateSyntaxError as err:
            raise PromptError(f"prompt template {err.filename or name}:{err.lineno}: "
                              f"syntax error: {err.message}") from None
        except jinja2.UndefinedError as err:
            raise PromptError(f"prompt template {_where(err, name)}: {err.message}") from None

    def messages(self, kind: str, context: dict) -> list[dict]:
        """``[system, user]`` chat messages for ``kind`` (one of ``KINDS``).

        Both templates get the same context, so that a user's system prompt may also
        mention the kernel.
        """
        if kind not in KINDS:
            raise PromptError(f"unknown prompt kind {kind!r} (one of {', '.join(KINDS)})")
        return [
            {"role": "system", "content": self.render("system.j2", **context)},
            {"role": "user", "content": self.render(f"{kind}.j2", **context)},
        ]


def _template_name(name: str) -> str:
    return name if name.endswith(".j2") else f"{name}.j2"


def _where(err: BaseException, fallback: str) -> str:
    """``file:line (in `source line`)`` of the innermost template frame of ``err``.

    Jinja rewrites tracebacks so that template code shows up as frames of the template
    file; the innermost one is where the undefined name was used (an included or
    inherited template, possibly, rather than the one asked for).
    """
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename.endswith(".j2")]
    if not frames:
        return fallback
    frame = frames[-1]
    line = f" (in `{frame.line.strip()}`)" if frame.line and frame.line.strip() else ""
    return f"{frame.filename}:{frame.lineno}{line}"
