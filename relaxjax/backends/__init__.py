"""Backends turn a lowered IRModule into an executable.

An executable is called as ``exe(dims, arrays) -> list of results`` where ``dims`` maps dim
names to ints (bound from the arguments) and ``arrays`` are the parameters' values.
"""
from __future__ import annotations

from .registry import available_backends, get_backend, register_backend, registered_backends  # noqa: F401

from . import numpy_backend  # noqa: E402,F401  (registers "numpy")
from . import llvm  # noqa: E402,F401  (registers "llvm")
from . import cuda  # noqa: E402,F401  (registers "cuda" and "cuda-emulated")
