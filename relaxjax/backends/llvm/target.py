"""The host: LLVM initialisation, target machine, CPU features, and the native libraries
generated code calls (libmvec for vector math, libgomp for threads, OpenBLAS for gemm)."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
import shutil
import subprocess
import tempfile

import llvmlite.binding as llvm


@functools.lru_cache(maxsize=None)
def init() -> None:
    """LLVM's native target, for target machines (code generation).  Host queries, loading
    libraries and loading compiled code need none: a warm process never pays for it."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@functools.lru_cache(maxsize=None)
def host_features() -> frozenset:
    feats = llvm.get_host_cpu_features()
    return frozenset(k for k, v in feats.items() if v)


@functools.lru_cache(maxsize=None)
def host_cpu() -> str:
    return llvm.get_host_cpu_name()


@functools.lru_cache(maxsize=None)
def host_feature_string() -> str:
    """The host's CPU features as LLVM's target-machine string ("+avx2,-avx512f,..."), with
    512-bit vectors preferred wherever AVX-512 is there.  LLVM tunes Intel's AVX-512 server
    CPUs (Skylake-X to Emerald Rapids) to vectorize at 256 bits, against the clock slowdown
    of wide registers on the first of them; on an Emerald Rapids VM that halved every
    elementwise kernel's width and called libmvec's 8-lane functions: GELU over 1024 x 1024
    floats ran 1.07 ms at 256 bits and 0.44 ms at 512, W1 1.13 and 0.66 ms, softmax 1.01
    and 0.51 ms (AMD's Zen 4 and 5 prefer 512 bits already)."""
    features = llvm.get_host_cpu_features().flatten()
    if "+avx512f" in features.split(","):
        features += ",-prefer-256-bit"
    return features


def vector_bits() -> int:
    """The widest vector registers generated code uses with FMA (0: none, no FMA)."""
    return {"avx512": 512, "avx2": 256}.get(vector_isa(), 0)


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
    return target.create_target_machine(cpu=host_cpu(), features=host_feature_string(),
                                        opt=3, reloc=reloc, codemodel="jitdefault")


@functools.lru_cache(maxsize=None)
def pic_target_machine():
    """The host target machine for position-independent code (shared libraries).  Never
    given to an MCJIT engine, so it can be reused for every module."""
    init()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=host_cpu(), features=host_feature_string(),
                                        opt=3, reloc="pic", codemodel="default")


@functools.lru_cache(maxsize=None)
def target_id() -> tuple:
    """What decides the machine code besides the module text: triple, CPU, features, and the
    versions of llvmlite and LLVM (part of every persistent-cache key)."""
    import llvmlite
    return (llvm.get_default_triple(), host_cpu(), host_feature_string(),
            llvmlite.__version__, ".".join(map(str, llvm.llvm_version_info)))


@functools.lru_cache(maxsize=None)
def linker() -> tuple | None:
    """The command that links an object file into a shared library: ``ld -shared`` (a few
    ms), else the C compiler driver (about 25 ms); None when neither is installed.  No
    libraries are linked in: undefined symbols (libm, libmvec, libgomp, the runtime globals,
    other kernels) resolve at load time from the process's global scope, which the backend
    fills first (``libmvec``, ``libgomp``, ``libm`` and the runtime library are loaded
    ``RTLD_GLOBAL``)."""
    ld = shutil.which("ld")
    if ld:
        return (ld, "-shared", "-z", "noexecstack")
    for cc in ("cc", "gcc", "clang"):
        path = shutil.which(cc)
        if path:
            return (path, "-shared", "-nostdlib", "-Wl,-z,noexecstack")
    return None


@functools.lru_cache(maxsize=None)
def _scratch_dir() -> str:
    """A private directory for the linker's files, removed when the process exits."""
    import atexit
    d = tempfile.mkdtemp(prefix="relaxjax-link-")
    atexit.register(shutil.rmtree, d, True)
    return d


def link_shared(obj: bytes) -> bytes:
    """An object file linked into a shared library, as bytes."""
    cmd = linker()
    if cmd is None:
        raise RuntimeError("no linker (ld or cc) found")
    fd, o = tempfile.mkstemp(suffix=".o", dir=_scratch_dir())
    so = o[:-2] + ".so"
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(obj)
        r = subprocess.run([*cmd, "-o", so, o], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"linking a shared library failed ({' '.join(cmd)}): {r.stderr.strip()}")
        with open(so, "rb") as f:
            return f.read()
    finally:
        for p in (o, so):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


def _load(names: list) -> str | None:
    """Load the first library found, ``RTLD_GLOBAL``.  A name is tried as given first (the
    dynamic loader finds a soname such as ``libmvec.so.1`` itself); ``find_library``, which
    runs the compiler and takes 10-20 ms, only when that fails."""
    for n in names:
        for path in (n, None):
            if path is None:
                if os.path.isabs(n):
                    break
                path = ctypes.util.find_library(n)
                if path is None:
                    break
            try:
                llvm.load_library_permanently(path)
                return path
            except RuntimeError:
                continue
    return None


@functools.lru_cache(maxsize=None)
def libmvec() -> bool:
    """glibc's vector math library; without it math stays scalar (correct, slower)."""
    return _load(["libmvec.so.1", "mvec"]) is not None


@functools.lru_cache(maxsize=None)
def libm() -> bool:
    """libm in the global symbol scope (Python links it; loaded again to be sure), so shared
    libraries of generated code resolve ``expf`` and friends from it."""
    return _load(["libm.so.6", "m"]) is not None


@functools.lru_cache(maxsize=None)
def libgomp() -> bool:
    """The OpenMP runtime for parallel loops.  Its idle workers spin 300000 times by default
    before sleeping, which starves OpenBLAS's own threads when a gemm follows a parallel
    kernel (a 64x512x2048 MLP block ran 5x slower on 2 cores); a short spin keeps the
    wake-up fast without that.  Set GOMP_SPINCOUNT yourself to override."""
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")
    return _load(["libgomp.so.1", "gomp"]) is not None


@functools.lru_cache(maxsize=None)
def openblas() -> tuple[str, str] | None:
    """(library path, symbol prefix) of the OpenBLAS that NumPy ships, so generated code calls
    the same BLAS NumPy uses.  None when NumPy was built against another BLAS."""
    for path in _openblas_candidates():
        lib = _library(path)
        for prefix in ("scipy_cblas_", "cblas_"):
            for suffix in ("64_", ""):
                if hasattr(lib, f"{prefix}sgemm{suffix}"):
                    llvm.load_library_permanently(path)
                    return path, (prefix, suffix)
    return None


@functools.lru_cache(maxsize=None)
def _library(path: str) -> ctypes.CDLL:
    return ctypes.CDLL(path)


def _openblas_candidates():
    """Paths that may hold NumPy's OpenBLAS: first those of NumPy's library folders that this
    process has already loaded (importing NumPy loads its BLAS; ``RTLD_NOLOAD`` asks the
    loader without loading anything, a fraction of a millisecond where reading
    /proc/self/maps took one and a recursive search of site-packages 15), then a search."""
    import numpy as np
    roots = [os.path.realpath(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")),
             os.path.realpath(os.path.dirname(np.__file__))]
    for root in roots:
        try:
            names = sorted(os.listdir(root))
        except OSError:
            continue
        for n in names:
            if "openblas" in n and ".so" in n:
                path = os.path.join(root, n)
                try:
                    ctypes.CDLL(path, mode=os.RTLD_NOLOAD)
                except OSError:
                    continue
                yield path
    for root in roots:
        yield from sorted(glob.glob(os.path.join(root, "**", "libscipy_openblas*.so*"), recursive=True))


@functools.lru_cache(maxsize=None)
def lapack_function(name: str) -> tuple[int, int] | None:
    """(address, integer bits) of LAPACK's ``<name>`` (Fortran ABI) in NumPy's OpenBLAS,
    or None when that library exports no LAPACK."""
    found = openblas()
    if found is None:
        return None
    path, (prefix, suffix) = found
    lib = _library(path)
    pre = prefix[:-len("cblas_")] if prefix.endswith("cblas_") else ""
    fn = getattr(lib, f"{pre}{name}_{suffix}" if suffix else f"{pre}{name}_", None)
    if fn is None:
        return None
    return ctypes.cast(fn, ctypes.c_void_p).value, 64 if suffix == "64_" else 32


def _openblas_extension(name: str):
    """NumPy's OpenBLAS's own function ``openblas_<name>`` (as scipy-openblas names it:
    ``scipy_openblas_<name>64_``), or None."""
    found = openblas()
    if found is None:
        return None
    path, (prefix, suffix) = found
    pre = prefix[:-len("cblas_")] if prefix.endswith("cblas_") else ""
    full = f"{pre}openblas_{name}{suffix.rstrip('_')}_" if suffix else f"openblas_{name}"
    return getattr(_library(path), full, None)


@functools.lru_cache(maxsize=None)
def blas_threads_setter() -> int | None:
    """The address of NumPy's OpenBLAS ``openblas_set_threads_callback_function`` (0.3.28
    and later; see ``blas_threads``), or None."""
    fn = _openblas_extension("set_threads_callback_function")
    return None if fn is None else ctypes.cast(fn, ctypes.c_void_p).value


def blas_threads() -> tuple[int, int]:
    """(threads, thread slots) of NumPy's OpenBLAS: ``openblas_get_num_threads()`` and the
    ``MAX_THREADS`` its configuration string names (its ``MAX_CPU_NUMBER``); (0, 0) when
    either is unknown."""
    get, config = _openblas_extension("get_num_threads"), _openblas_extension("get_config")
    if get is None or config is None:
        return 0, 0
    config.restype = ctypes.c_char_p
    for word in (config() or b"").decode(errors="replace").split():
        if word.startswith("MAX_THREADS=") and word[12:].isdigit():
            return int(get()), int(word[12:])
    return 0, 0


@functools.lru_cache(maxsize=None)
def blas_function(name: str) -> int | None:
    """The address of NumPy's OpenBLAS ``cblas_<name>`` ("sgemm", "dgemm", "sgemv", "dgemv"),
    which generated code calls through a global function pointer (never a baked address)."""
    found = openblas()
    if found is None:
        return None
    path, (prefix, suffix) = found
    fn = getattr(_library(path), f"{prefix}{name}{suffix}", None)
    return None if fn is None else ctypes.cast(fn, ctypes.c_void_p).value
