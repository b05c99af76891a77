"""The host: LLVM initialisation, target machine, CPU features, and the native libraries
generated code calls (libmvec for vector math, libgomp for threads, OpenBLAS for gemm)."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os

import llvmlite.binding as llvm


@functools.lru_cache(maxsize=None)
def init() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@functools.lru_cache(maxsize=None)
def host_features() -> frozenset:
    init()
    feats = llvm.get_host_cpu_features()
    return frozenset(k for k, v in feats.items() if v)


def host_cpu() -> str:
    init()
    return llvm.get_host_cpu_name()


def vector_isa() -> str:
    """Which libmvec variants fit this CPU: "avx512", "avx2" or "sse" (x86-64's baseline)."""
    f = host_features()
    if "avx512f" in f:
        return "avx512"
    if "avx2" in f and "fma" in f:
        return "avx2"
    return "sse"


def target_machine(reloc: str = "default"):
    init()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=host_cpu(), features=llvm.get_host_cpu_features().flatten(),
                                        opt=3, reloc=reloc, codemodel="jitdefault")


def _load(names: list) -> str | None:
    for n in names:
        path = n if os.path.isabs(n) else (ctypes.util.find_library(n) or n)
        try:
            llvm.load_library_permanently(path)
            return path
        except RuntimeError:
            continue
    return None


@functools.lru_cache(maxsize=None)
def libmvec() -> bool:
    """glibc's vector math library; without it math stays scalar (correct, slower)."""
    init()
    return _load(["libmvec.so.1", "mvec"]) is not None


@functools.lru_cache(maxsize=None)
def libgomp() -> bool:
    """The OpenMP runtime for parallel loops.  Its idle workers spin 300000 times by default
    before sleeping, which starves OpenBLAS's own threads when a gemm follows a parallel
    kernel (a 64x512x2048 MLP block ran 5x slower on 2 cores); a short spin keeps the
    wake-up fast without that.  Set GOMP_SPINCOUNT yourself to override."""
    init()
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")
    return _load(["libgomp.so.1", "gomp"]) is not None


@functools.lru_cache(maxsize=None)
def openblas() -> tuple[str, str] | None:
    """(library path, symbol prefix) of the OpenBLAS that NumPy ships, so generated code calls
    the same BLAS NumPy uses.  None when NumPy was built against another BLAS."""
    init()
    import numpy as np
    roots = [os.path.dirname(np.__file__), os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")]
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, "**", "libscipy_openblas*.so*"), recursive=True)):
            lib = ctypes.CDLL(path)
            for prefix in ("scipy_cblas_", "cblas_"):
                for suffix in ("64_", ""):
                    if hasattr(lib, f"{prefix}sgemm{suffix}"):
                        llvm.load_library_permanently(path)
                        return path, (prefix, suffix)
    return None
