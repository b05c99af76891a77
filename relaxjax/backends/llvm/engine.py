"""The LLVM backend's compiler and loader: LLVM IR optimised at O3 for the host CPU, then
JIT-compiled in memory (MCJIT) or built into a shared library kept in the persistent cache;
the runtime globals generated code reads (thread count, parallel threshold, BLAS pointers).
One engine per module text, kept for the process."""
from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import tempfile
import threading
import weakref
from dataclasses import dataclass

import llvmlite.binding as llvm

from ... import cache
from ...tir import PrimFunc
from . import blas_threads, gemm, gemm_module, mathlib, target
from .codegen import KernelEmitter, helper_source
from .column_reductions import block_column_reductions
from .host import check_object_layout
from .irtypes import SEGMENT_OPTNONE

# Process-wide knobs read by every kernel: thread count (0 = OpenMP's default) and the work
# (elements touched) below which a kernel stays on the calling thread; and the BLAS functions
# segments call, as function pointers.  Generated code reads them as external globals.  In
# MCJIT-compiled code they resolve to these ctypes objects (``llvm.add_symbol``); shared
# libraries from the persistent cache resolve them from the small runtime library
# (``_RUNTIME_TEXT``, itself cached), whose copies are kept equal to these (``_set_global``).
# Below 128 K elements a kernel runs in tens of microseconds on one core, about what a fork
# and join of the OpenMP team costs when OpenBLAS's workers still spin after a gemm and the
# two pools fight for the cores (attention at s = 128: 830 us with a 32 K threshold, 170 us
# with this one).
DEFAULT_PARALLEL_MIN_WORK = 1 << 17
NUM_THREADS = ctypes.c_int32(0)
PARALLEL_MIN_WORK = ctypes.c_int64(DEFAULT_PARALLEL_MIN_WORK)
SERIAL_UNTIL = ctypes.c_int64(0)      # cycle counter value until which kernels stay serial
# the CBLAS functions segments call, through ``@rj_blas_<name>`` pointers
BLAS_FUNCTIONS = ("sgemm", "dgemm", "cgemm", "zgemm", "sgemv", "dgemv", "cgemv", "zgemv",
                  "ssyrk", "dsyrk")
_GLOBALS: dict = {"rj_num_threads": [NUM_THREADS], "rj_parallel_min_work": [PARALLEL_MIN_WORK],
                  "rj_serial_until": [SERIAL_UNTIL],
                  **{f"rj_blas_{n}": [ctypes.c_void_p(None)] for n in BLAS_FUNCTIONS},
                  **{gemm.pointer_symbol(v): [ctypes.c_void_p(None)] for v in gemm.VARIANTS},
                  "rj_gemm_loader": [ctypes.c_void_p(None)]}
_RUNTIME_TEXT = f"""; relaxjax runtime globals, read by generated kernels and segments
@rj_num_threads = global i32 0
@rj_parallel_min_work = global i64 {DEFAULT_PARALLEL_MIN_WORK}
@rj_serial_until = global i64 0
""" + "".join(f"@rj_blas_{n} = global ptr null\n" for n in BLAS_FUNCTIONS) + \
    "".join(f"@{gemm.pointer_symbol(v)} = global ptr null\n" for v in gemm.VARIANTS) + \
    "@rj_gemm_loader = global ptr null\n"
_GEMMS: dict = {}          # generated product -> its module, loaded once and kept

# Bump when the machine code can change without the module text changing (optimisation
# options, linking): part of every persistent-cache key.
CODEGEN_VERSION = "2"

_SEGMENT = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.py_object, ctypes.py_object)
# Compiled modules are shared while something uses them: an executable holds its module
# (its kernels and segments together), this map only finds a live one again.  A module no
# executable holds any more is freed: an MCJIT engine with its machine code, a shared
# library closed (1000 dropped functions kept 200 MiB).  Whoever holds an address into a
# module holds the module.
_ENGINES: weakref.WeakValueDictionary = weakref.WeakValueDictionary()   # (native, sha256 of text) -> module
_LOCK = threading.RLock()
_RUNTIME: list = []        # the loaded runtime SharedModule, once
_NATIVE_FAILED: list = []  # the error that made shared libraries unusable in this process
log = logging.getLogger("relaxjax.llvm")


def _serial_after_fork() -> None:
    """In a child made by ``fork`` after the parent ran an OpenMP team: libgomp's thread
    pool is not fork-safe (the child's first ``GOMP_parallel`` waits forever for workers
    that were not copied), so the child runs every kernel on its calling thread, through
    the busy-machine rule's flag, which no team in the child will ever lower."""
    _set_global("rj_serial_until", (1 << 63) - 1)


os.register_at_fork(after_in_child=_serial_after_fork)


def set_num_threads(n: int) -> None:
    """Threads for parallel loops (0: OpenMP's default, one per core)."""
    _set_global("rj_num_threads", int(n))


def get_num_threads() -> int:
    """What :func:`set_num_threads` set last (0: OpenMP's default)."""
    return int(NUM_THREADS.value)


def set_parallel_threshold(work: int) -> None:
    """Kernels touching fewer elements than this run on the calling thread."""
    _set_global("rj_parallel_min_work", int(work))


def _set_global(name: str, value) -> None:
    for v in _GLOBALS[name]:
        v.value = value


def _runtime_symbols() -> None:
    """The runtime globals for MCJIT-compiled code (and the BLAS pointers' values)."""
    for name in BLAS_FUNCTIONS:
        if _GLOBALS[f"rj_blas_{name}"][0].value is None:
            _set_global(f"rj_blas_{name}", target.blas_function(name))
    for name, vs in _GLOBALS.items():
        llvm.add_symbol(name, ctypes.addressof(vs[0]))


@functools.lru_cache(maxsize=None)
def prepare_process() -> None:
    """What every LLVM executable needs of the process before its code loads or runs, once:
    the object layout segments read, libmvec, libgomp (one thread without it) and the
    runtime globals (BLAS pointers)."""
    check_object_layout()
    _set_global("rj_gemm_loader", ctypes.cast(_GEMM_LOADER, ctypes.c_void_p).value)
    target.libmvec()
    if not target.libgomp():
        set_num_threads(1)
    else:
        blas_threads.install(target.blas_threads_setter(), *target.blas_threads(),
                             lambda text, names: compile_llvm(text, names, native=generated_products()))
    _runtime_symbols()


def _runtime_library() -> None:
    """Load the runtime globals as a shared library (``RTLD_GLOBAL``, before any cached
    kernel) and copy the current values into it."""
    with _LOCK:
        if _RUNTIME:
            return
        _runtime_symbols()
        target.libm()
        rt = SharedModule(_RUNTIME_TEXT, [])
        for name, vs in _GLOBALS.items():
            v = type(vs[0]).in_dll(rt.lib, name)
            v.value = vs[0].value
            vs.append(v)
        _RUNTIME.append(rt)


# The generated products load when a segment first calls one (its runtime pointer still
# null): the segment calls ``rj_gemm_loader`` with the product's index in ``gemm.VARIANTS``, which compiles
# or loads it (``use_gemms``) and sets the pointer; a product no call reaches costs nothing
# (the batch-1 decode step never runs its transposed float32 product: 0.5 s of a cold
# start).  A load that fails leaves the pointer null, and the segment calls BLAS instead.
_GEMMS_FAILED: set = set()  # products whose load failed: BLAS runs them, no second try


def _load_gemm(index: int) -> None:
    v = gemm.VARIANTS[index]
    if v in _GEMMS_FAILED:
        return
    try:
        use_gemms([v])
    except Exception as e:             # (a ctypes callback cannot raise: the segment falls back)
        _GEMMS_FAILED.add(v)
        log.warning("relaxjax: the generated product %s did not load (%s); BLAS runs it", v, e)


_GEMM_LOADER = ctypes.CFUNCTYPE(None, ctypes.c_int32)(_load_gemm)


def use_gemms(variants) -> None:
    """Make the generated products ``variants`` (``gemm.VARIANTS``) callable through their
    runtime pointers: each compiled once per machine (a shared library in the persistent
    cache, about 0.1 s) or loaded from there, once per process."""
    for v in sorted(variants):
        with _LOCK:
            if v in _GEMMS:
                continue
            if not generated_products():
                raise RuntimeError(f"the generated matrix product {v} needs a linker for its "
                                   "shared library (its packing buffers are thread-local, "
                                   "which in-memory MCJIT code cannot hold)")
            _runtime_library()
            mod = SharedModule(gemm_module.module_text(v, target.vector_bits()), [v], exports=False,
                               pipeline=GEMM_PIPELINE)
            _GEMMS[v] = mod
            _set_global(gemm.pointer_symbol(v), mod.address(v))


def generated_products() -> bool:
    """Whether the generated matrix products can load: each is a shared library (built in
    a temporary file when the persistent cache is off), so it needs a linker and a
    loader that work; without them every product is a BLAS call."""
    return not _NATIVE_FAILED and target.linker() is not None


def native_code() -> bool:
    """Whether new executables compile to shared libraries through the persistent cache
    (cache on, a linker found, and no failure so far) rather than to in-memory MCJIT code."""
    return cache.enabled() and generated_products()


@dataclass(frozen=True)
class Pipeline:
    """How a module is optimised: LLVM's default pipeline at speed ``level``, with or without
    the loop and SLP vectorizers, or, where ``passes`` are given, those module passes alone
    (llvmlite's ``add_<name>_pass``), in that order."""
    level: int = 3
    vectorize: bool = True
    passes: tuple = ()


# Generated code is O3 with both vectorizers.  The generated matrix products' micro-kernels
# are written with explicit vectors, loops with their accumulators in phis or promotable
# slots: SROA, instruction combining and GVN leave the code the default pipelines leave (one
# thread, every shape class of benchmarks/gemm.py within 1 %, RESULTS.md session 16), in a
# sixth of the time: 0.05 s instead of O2's 0.33 (O1: 0.27) per product, about 0.3 s of a
# cold first token.  The attention modules, also explicit vectors, lose 10-14 % with those
# passes alone, but run as fast at O1 as at O3 (W5 at s = 128 and 1024, causal 8 heads,
# decode against a cache of 1000 at batch 1 and 8: within the runs' noise) and take 0.05 s
# instead of 0.08 (ATTENTION_PIPELINE).
O3 = Pipeline()
ATTENTION_PIPELINE = Pipeline(1, False)
GEMM_PIPELINE = Pipeline(2, False, ("sroa", "instruction_combine", "simplify_cfg", "new_gvn",
                                    "instruction_combine", "aggressive_dce", "simplify_cfg",
                                    "global_dead_code_eliminate"))


def _optimize(text: str, tm, pipeline: Pipeline = O3):
    """Parse, verify and optimise ``text`` for the host as ``pipeline`` says."""
    mod = llvm.parse_assembly(text)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=pipeline.level)
    pto.loop_vectorization = pipeline.vectorize
    pto.slp_vectorization = pipeline.vectorize
    pb = llvm.create_pass_builder(tm, pto)
    if pipeline.passes:
        mpm = llvm.create_new_module_pass_manager()
        for name in pipeline.passes:
            getattr(mpm, f"add_{name}_pass")()
    else:
        mpm = pb.getModulePassManager()
    mpm.run(mod, pb)
    return mod


class CompiledModule:
    """An LLVM module optimised and JIT-compiled in memory (MCJIT); ``functions[name]`` are
    ctypes callables."""

    def __init__(self, text: str, entry_names: list, pipeline: Pipeline = O3):
        target.init()
        self.text = text
        tm = target.target_machine()
        mod = _optimize(text, tm, pipeline)
        self.optimized = str(mod)
        self.engine = llvm.create_mcjit_compiler(mod, tm)
        self.engine.finalize_object()
        self.functions = {n: _SEGMENT(self.engine.get_function_address(n)) for n in entry_names}

    def address(self, name: str) -> int:
        return self.engine.get_function_address(name)

    def assembly(self) -> str:
        mod = llvm.parse_assembly(self.optimized)
        return target.target_machine().emit_assembly(mod)


class SharedModule:
    """An LLVM module as a shared library from the persistent cache: loaded from there with
    no LLVM work when an entry for this text and target exists, else optimised, compiled
    to position-independent object code, linked (``target.link_shared``) and stored there.
    Loaded ``RTLD_GLOBAL`` (``exports``) so the modules loaded after it resolve its exported
    symbols (the runtime globals, kernel entries), else ``RTLD_LOCAL`` (segments: called
    only through their addresses).  ``from_cache`` says whether it came from the cache;
    ``data`` is the library's bytes (what a stored executable keeps, see
    :func:`load_shared`), ``digest`` the sha256 of its text.  ``text`` is None for a
    library loaded from a stored executable until its owner emits the text again (only
    inspection needs it)."""

    def __init__(self, text: str | None, entry_names: list, exports: bool = True,
                 data: bytes | None = None, digest: str | None = None, pipeline: Pipeline = O3):
        self.text = text
        self.pipeline = pipeline
        self.digest = digest or _digest(text)
        mode = ctypes.RTLD_GLOBAL if exports else ctypes.RTLD_LOCAL
        self._optimized = None
        self.lib = None
        if data is not None:          # a stored executable's own copy: no cache lookup
            self.lib = _load_private(data, mode)
        else:
            parts = cache_key_parts(text) + ((repr(self.pipeline),) if self.pipeline != O3 else ())
            data = cache.get("llvm", parts, ".so")
            if data is not None:
                try:
                    self.lib = _load_private(data, mode)
                except OSError as e:      # valid file, but not loadable here: rebuild it
                    log.warning("relaxjax: cannot load a cached library (%s); compiling again", e)
        self.from_cache = self.lib is not None
        if self.lib is None:
            tm = target.pic_target_machine()
            mod = _optimize(text, tm, self.pipeline)
            self._optimized = str(mod)
            data = target.link_shared(tm.emit_object(mod))
            cache.put("llvm", parts, data, ".so")
            self.lib = _load_private(data, mode)
        self.data = data
        self.functions = {n: _SEGMENT(self.address(n)) for n in entry_names}
        # closed once no executable holds this module (see _ENGINES); glibc keeps it mapped
        # while a library loaded later still binds to its symbols
        weakref.finalize(self, _dlclose, self.lib._handle).atexit = False

    def address(self, name: str) -> int:
        return ctypes.cast(getattr(self.lib, name), ctypes.c_void_p).value

    @property
    def optimized(self) -> str:
        """The optimised module text (computed again when the library came from the cache)."""
        if self._optimized is None:
            if self.text is None:
                raise RuntimeError("the text of a library loaded from a stored executable is "
                                   "unknown until the executable emits it again")
            with _LOCK:
                self._optimized = str(_optimize(self.text, target.pic_target_machine(), self.pipeline))
        return self._optimized

    def assembly(self) -> str:
        with _LOCK:
            return target.pic_target_machine().emit_assembly(llvm.parse_assembly(self.optimized))


def _load_private(data: bytes, mode: int) -> ctypes.CDLL:
    """``dlopen`` a private copy of a shared library, unlinked once loaded: the cache entry
    is shared with other processes, and one that truncates or rewrites it in place would
    pull the pages from under code mapped from it (SIGBUS at the next call).  The copy goes
    next to the cache entries (a file system known to allow executable mappings), else to
    the temporary directory."""
    dirs = [str(cache.cache_dir() / "llvm"), tempfile.gettempdir()]
    err: OSError | None = None
    for d in dirs:
        try:
            fd, path = tempfile.mkstemp(prefix=cache.TMP_PREFIX + "load-", suffix=".so", dir=d)
        except OSError as e:
            err = e
            continue
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return ctypes.CDLL(path, mode=mode)
        except OSError as e:
            err = e
        finally:
            os.unlink(path)
    raise err


def _dlclose(handle: int) -> None:
    import _ctypes
    _ctypes.dlclose(handle)


def cache_key_parts(text: str) -> tuple:
    """The persistent-cache key of an LLVM module's machine code: its text, the target
    (triple, CPU, features, llvmlite and LLVM versions) and how it is compiled and linked."""
    return (text, *machine_code_key())


def machine_code_key() -> tuple:
    """What decides machine code besides the module text (see ``cache_key_parts``)."""
    return (target.target_id(), CODEGEN_VERSION, os.path.basename(target.linker()[0]))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def set_native_pointers(module, natives: dict) -> None:
    """Point each of ``module``'s library pointers (``natives``: its global -> the library
    function's registered name) at the function's native implementation, compiled or
    loaded here if need be.  Raises ValueError when a name no longer has the registration
    the global was made for (its version is part of the global's name)."""
    from ...library import lookup
    for sym, name in natives.items():
        impl = lookup(name)
        if not sym.endswith(f".v{impl.version}"):
            raise ValueError(f"library function {name!r} is registered otherwise than when {sym} was made")
        addr = impl.cpu_native
        if addr is None:
            raise ValueError(f"library function {name!r} has no native cpu implementation any more")
        where = module.engine.get_global_value_address(sym) if isinstance(module, CompiledModule) \
            else module.address(sym)
        ctypes.c_void_p.from_address(where).value = addr


def compile_llvm(text: str, entry_names: list, native: bool = False, exports: bool = False,
                 pipeline: Pipeline = O3):
    """Compile once per distinct module text in this process: in memory with MCJIT, or
    (``native``) as a shared library through the persistent cache, whose symbols later
    libraries resolve when ``exports``; optimised as ``pipeline`` says."""
    key = (native, _digest(text))
    with _LOCK:
        cm = _ENGINES.get(key)
        if cm is None:
            if native:
                _runtime_library()
            cm = _ENGINES[key] = SharedModule(text, entry_names, exports, digest=key[1], pipeline=pipeline) \
                if native else CompiledModule(text, entry_names, pipeline)
        elif cm.text is None:         # loaded from a stored executable: now its text is known
            cm.text = text
    return cm


def load_shared(digest: str, data: bytes, entry_names: list) -> SharedModule:
    """The shared library a stored executable kept (``data``, built from a module text whose
    sha256 is ``digest``): the process's live copy of that module if there is one, else
    ``data`` loaded as it is, with no LLVM work and no text (see ``SharedModule.text``)."""
    key = (True, digest)
    with _LOCK:
        cm = _ENGINES.get(key)
        if cm is None:
            _runtime_library()
            cm = _ENGINES[key] = SharedModule(None, entry_names, exports=False, data=data,
                                              digest=digest)
    return cm


_KERNEL_EXTERNALS = ("@rj_num_threads = external global i32\n@rj_parallel_min_work = external global i64\n"
                     "@rj_serial_until = external global i64")
_KERNEL_DECLS = frozenset({"declare void @GOMP_parallel(ptr, ptr, i32, i32)", "declare i32 @omp_get_thread_num()",
                           "declare i32 @omp_get_num_threads()", "declare i64 @llvm.smax.i64(i64, i64)",
                           "declare i64 @llvm.smin.i64(i64, i64)", "declare i64 @llvm.readcyclecounter()"})
_ATTRIBUTES = ('attributes #0 = { nounwind }\nattributes #1 = { nounwind noinline "no-trapping-math"="true" }\n'
               f'attributes {SEGMENT_OPTNONE} = {{ noinline optnone }}')


@dataclass(frozen=True)
class KernelCode:
    """One loop-level program's LLVM code, in parts a module can be assembled from.
    ``symbol`` is derived from the program's code alone (whatever its buffers and dims are
    called), so equal programs get equal symbols and a module holds each once."""
    symbol: str
    body: str
    decls: frozenset
    helpers: tuple
    math_used: frozenset


def kernel_code(f: PrimFunc, tiles: bool = False) -> KernelCode:
    """``f``'s code (with its tile function for a product's epilogue, ``tiles``)."""
    em = KernelEmitter(block_column_reductions(f), "@@SYM@@", tiles)
    body = em.emit()
    decls = set(_KERNEL_DECLS)
    helpers = []
    for h in sorted(em.helpers_used, key=str):
        src = helper_source(h)
        decls |= {line for line in src.split("\n") if line.startswith("declare")}
        rest = "\n".join(line for line in src.split("\n") if not line.startswith("declare"))
        if rest.strip():
            helpers.append(rest)
    text = "\n\n".join(
        [_KERNEL_EXTERNALS, "\n".join(sorted(decls)), "\n".join(mathlib.declarations(em.math_used))]
        + helpers + [body] + [_ATTRIBUTES]) + "\n"
    sym = "rjk_" + hashlib.sha256(text.encode()).hexdigest()[:20]
    return KernelCode(sym, body.replace("@@SYM@@", sym), frozenset(decls), tuple(helpers),
                      frozenset(em.math_used))


def module_with_kernels(kernels: list, decls: set, parts: list, title: str) -> str:
    """One LLVM module holding ``kernels`` (``KernelCode``, each once) and ``parts`` (the
    segments that call them), with ``decls`` for the parts: one optimisation, one object,
    one link and one cache entry for a whole executable, where a module per kernel paid
    each of them per kernel (27 for a fluid solver's loop body)."""
    unique = list({k.symbol: k for k in kernels}.values())
    all_decls = set(decls)
    math_used: set = set()
    helpers: dict = {}
    for k in unique:
        all_decls |= k.decls
        math_used |= k.math_used
        helpers.update(dict.fromkeys(k.helpers))
    return "\n\n".join([f"; {title}", _KERNEL_EXTERNALS, "\n".join(sorted(all_decls)),
                          "\n".join(mathlib.declarations(math_used))] + list(helpers)
                         + [k.body for k in unique] + list(parts) + [_ATTRIBUTES]) + "\n"
