"""``registrar``: the one way op tables are filled (compute rules, scalar-op renderings)."""
from __future__ import annotations

from typing import Callable


def registrar(table: dict) -> Callable:
    """A decorator factory: ``@register("a", "b")`` on ``f`` sets ``table["a"]`` and
    ``table["b"]`` to ``f`` (and returns ``f``)."""
    def register(*names: str) -> Callable:
        def deco(fn: Callable) -> Callable:
            for n in names:
                table[n] = fn
            return fn
        return deco
    return register
