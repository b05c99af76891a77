"""The backend registry: each backend registers its compile function by name; the driver
looks backends up here (and never imports one directly)."""
from __future__ import annotations

from typing import Callable

_BACKENDS: dict[str, Callable] = {}
_AVAILABLE: dict[str, Callable[[], bool]] = {}


def register_backend(name: str, compile_fn: Callable, available: Callable[[], bool] | None = None) -> None:
    """``available()`` says whether the backend can run here (a GPU is present, ...)."""
    _BACKENDS[name] = compile_fn
    _AVAILABLE[name] = available or (lambda: True)


def get_backend(name: str) -> Callable:
    if name not in _BACKENDS:
        raise ValueError(f"unknown backend {name!r}; available backends: {', '.join(sorted(_BACKENDS))}")
    return _BACKENDS[name]


def available_backends() -> list[str]:
    """The backends that can run on this machine (every test runs on each)."""
    return sorted(n for n in _BACKENDS if _AVAILABLE[n]())


def registered_backends() -> list[str]:
    return sorted(_BACKENDS)
