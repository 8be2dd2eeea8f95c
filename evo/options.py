"""A typed option: a dataclass field with its allowed range and a line of help.

``evo.config`` validates every table of ``evo.toml`` against dataclasses made of these; a
strategy module declares its own table the same way (``Options``, ``evo.strategies``).
"""

from __future__ import annotations

from dataclasses import field


def opt(default, *, lo=None, hi=None, choices=None, doc="", item=None):
    """A field with its allowed range; ``doc`` is shown by errors and the default file.
    ``item`` checks each element of a list: (type, lowest value or None, what it is)."""
    meta = {"lo": lo, "hi": hi, "choices": choices, "doc": doc, "item": item}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)
