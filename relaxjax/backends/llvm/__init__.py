"""The LLVM CPU backend (llvmlite): loop-level programs as vectorized, multi-threaded code."""
from __future__ import annotations

from ..registry import register_backend
from .engine import get_num_threads, set_num_threads, set_parallel_threshold  # noqa: F401
from .runtime import LLVMExecutable

register_backend("llvm", LLVMExecutable)
