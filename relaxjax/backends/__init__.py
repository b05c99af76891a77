"""Backends turn a (lowered) IRModule into an executable.

An executable is called as ``exe(dims, arrays) -> list of results`` where ``dims`` maps dim
names to ints (bound from the arguments) and ``arrays`` are the parameters' values.
"""
from __future__ import annotations

from typing import Callable

_BACKENDS: dict[str, Callable] = {}


def register_backend(name: str, compile_fn: Callable) -> None:
    _BACKENDS[name] = compile_fn


def get_backend(name: str) -> Callable:
    if name not in _BACKENDS:
        raise ValueError(f"unknown backend {name!r}; available backends: {', '.join(sorted(_BACKENDS))}")
    return _BACKENDS[name]


def available_backends() -> list[str]:
    return sorted(_BACKENDS)


from . import numpy_backend  # noqa: E402,F401  (registers "numpy")
from . import llvm  # noqa: E402,F401  (registers "llvm")
