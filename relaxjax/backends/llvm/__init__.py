"""The LLVM CPU backend (llvmlite): loop-level programs as vectorized, multi-threaded code."""
from __future__ import annotations

from ..registry import register_backend
from .runtime import LLVMExecutable, set_num_threads, set_parallel_threshold  # noqa: F401

register_backend("llvm", LLVMExecutable)
