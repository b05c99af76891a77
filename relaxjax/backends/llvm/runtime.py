"""The LLVM backend's executable: plan the host program, emit one LLVM module (kernels and
segments), optimise it at O3 for the host CPU, JIT it with MCJIT, and run calls through a
generated Python function that sets up buffers and calls each segment once.  Buffers follow
``compile.memplan.plan_memory``: intermediates share storage (one workspace per thread when
the dims are bounded), large results come from a pool (see ``_RunnerMemory``)."""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import tempfile
import threading
import weakref

import llvmlite.binding as llvm
import numpy as np

from ... import cache
from ...compile.memplan import ALIGN, byte_size
from ...tir import PrimFunc
from ...errors import ShapeError
from ...ir import Binding, Function, IRModule, Literal, Var
from ...shapes import dim_str, eval_dim, free_symbols, is_symbolic
from ..executable import Executable
from . import mathlib, target
from .codegen import KernelEmitter, helper_source
from ...library import BUILTIN, lookup
from .host import HostCheck, HostOp, LibraryHostCall, Segment, SegmentEmitter, check_object_layout

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
_GLOBALS: dict = {"rj_num_threads": [NUM_THREADS], "rj_parallel_min_work": [PARALLEL_MIN_WORK],
                  "rj_blas_sgemm": [ctypes.c_void_p(None)], "rj_blas_dgemm": [ctypes.c_void_p(None)]}
_RUNTIME_TEXT = f"""; relaxjax runtime globals, read by generated kernels and segments
@rj_num_threads = global i32 0
@rj_parallel_min_work = global i64 {DEFAULT_PARALLEL_MIN_WORK}
@rj_blas_sgemm = global ptr null
@rj_blas_dgemm = global ptr null
"""

# Bump when the machine code can change without the module text changing (optimisation
# options, linking): part of every persistent-cache key.
CODEGEN_VERSION = "1"

# Memory: intermediates share storage per ``plan_memory``, carved from one workspace per
# executable and thread when the plan bounds it (else per call, large ones from the pool);
# large results come from a process-wide pool and go back to it when the array the user got
# (and every view of it) is gone.  ``POOLING`` is read when an executable is built: False
# builds the plain runner (one np.empty per value per call).
POOLING = True
POOL_MIN_BYTES = 256 * 1024           # smaller buffers: plain np.empty
WORKSPACE_MAX_BYTES = 1 << 30         # a larger bound (per thread) sizes storages per call instead

_SEGMENT = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.py_object, ctypes.py_object)
_ENGINES: dict = {}        # (native, sha256 of text) -> CompiledModule | SharedModule
_KERNELS: dict = {}        # (native, symbol) -> (module, text)
_LOCK = threading.RLock()
_RUNTIME: list = []        # the loaded runtime SharedModule, once
_NATIVE_FAILED: list = []  # the error that made shared libraries unusable in this process
log = logging.getLogger("relaxjax.llvm")


def set_num_threads(n: int) -> None:
    """Threads for parallel loops (0: OpenMP's default, one per core)."""
    _set_global("rj_num_threads", int(n))


def set_parallel_threshold(work: int) -> None:
    """Kernels touching fewer elements than this run on the calling thread."""
    _set_global("rj_parallel_min_work", int(work))


def _set_global(name: str, value) -> None:
    for v in _GLOBALS[name]:
        v.value = value


def _runtime_symbols() -> None:
    """The runtime globals for MCJIT-compiled code (and the BLAS pointers' values)."""
    for name in ("sgemm", "dgemm"):
        if _GLOBALS[f"rj_blas_{name}"][0].value is None:
            _set_global(f"rj_blas_{name}", target.blas_function(name))
    for name, vs in _GLOBALS.items():
        llvm.add_symbol(name, ctypes.addressof(vs[0]))


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


def native_code() -> bool:
    """Whether new executables compile to shared libraries through the persistent cache
    (cache on, a linker found, and no failure so far) rather than to in-memory MCJIT code."""
    return cache.enabled() and not _NATIVE_FAILED and target.linker() is not None


def _aligned_block(nbytes: int) -> np.ndarray:
    """A 1-d uint8 array of ``nbytes`` whose data is ``ALIGN``-byte aligned."""
    raw = np.empty(nbytes + ALIGN, np.uint8)
    off = -raw.__array_interface__["data"][0] % ALIGN
    return raw[off:off + nbytes]


class BufferPool:
    """Process-wide free lists of large aligned uint8 blocks, keyed by byte size.

    Bounded: at most ``max_per_size`` blocks of one size and ``max_bytes`` in all; a block
    that does not fit is dropped (freed).  ``put`` runs from finalizers, i.e. in whatever
    thread the garbage collector runs, possibly while that thread is inside ``take``/``put``
    itself: it never waits for a lock its own thread holds (the block is dropped instead)."""

    def __init__(self, max_per_size: int = 8, max_bytes: int = 1 << 30):
        self.max_per_size, self.max_bytes = max_per_size, max_bytes
        self._free: dict = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self._holder = None
        self._owned: dict = {}         # id(weakref) -> (weakref, block)
        self.hits = self.misses = self.returned = self.dropped = 0

    def take(self, nbytes: int):
        """A free block of exactly ``nbytes``, or None."""
        self._acquire()
        try:
            lst = self._free.get(nbytes)
            blk = lst.pop() if lst else None
            if blk is not None:
                self._bytes -= nbytes
                self.hits += 1
            else:
                self.misses += 1
        finally:
            self._release()
        return blk

    def put_when_dead(self, owner, blk: np.ndarray) -> None:
        """Give ``blk`` back once ``owner`` is garbage collected (what ``weakref.finalize``
        does, at a third of its cost: a weak reference with a callback, kept alive here)."""
        r = weakref.ref(owner, self._dead)
        self._owned[id(r)] = (r, blk)

    def _dead(self, r) -> None:
        entry = self._owned.pop(id(r), None)
        if entry is not None:
            self.put(entry[1])

    def _acquire(self) -> None:
        self._lock.acquire()
        self._holder = threading.get_ident()

    def _release(self) -> None:
        self._holder = None
        self._lock.release()

    def put(self, blk: np.ndarray) -> None:
        lock = self._lock
        if not lock.acquire(blocking=False):
            if self._holder == threading.get_ident():    # re-entered from the GC: drop it
                self.dropped += 1
                return
            lock.acquire()
        try:
            self._holder = threading.get_ident()
            n = blk.nbytes
            lst = self._free.setdefault(n, [])
            if len(lst) < self.max_per_size and self._bytes + n <= self.max_bytes:
                lst.append(blk)
                self._bytes += n
                self.returned += 1
            else:
                self.dropped += 1
        finally:
            self._holder = None
            lock.release()

    def clear(self) -> None:
        self._acquire()
        try:
            self._free.clear()
            self._bytes = 0
        finally:
            self._release()

    def stats(self) -> dict:
        self._acquire()
        try:
            blocks = sum(map(len, self._free.values()))
            out = {"blocks": blocks, "bytes": self._bytes, "hits": self.hits, "misses": self.misses,
                   "returned": self.returned, "dropped": self.dropped, "in_use": len(self._owned)}
        finally:
            self._release()
        return out


POOL = BufferPool()

# per-executable counters: calls; NumPy allocations of intermediates / of outputs; pool hits and
# misses; the allocations of intermediates / outputs in the last call
_CALLS, _ALLOC_TMP, _ALLOC_OUT, _HITS, _MISSES, _LAST_TMP, _LAST_OUT = range(7)


def _optimize(text: str, tm):
    """Parse, verify and optimise ``text`` at O3 for the host (loop and SLP vectorization)."""
    mod = llvm.parse_assembly(text)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


class CompiledModule:
    """An LLVM module optimised and JIT-compiled in memory (MCJIT); ``functions[name]`` are
    ctypes callables."""

    def __init__(self, text: str, entry_names: list):
        target.init()
        self.text = text
        tm = target.target_machine()
        mod = _optimize(text, tm)
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
    only through their addresses).  ``from_cache`` says whether it came from the cache."""

    def __init__(self, text: str, entry_names: list, exports: bool = True):
        self.text = text
        mode = ctypes.RTLD_GLOBAL if exports else ctypes.RTLD_LOCAL
        self._optimized = None
        parts = cache_key_parts(text)
        self.lib = None
        path = cache.get_path("llvm", parts, ".so")
        if path is not None:
            try:
                self.lib = ctypes.CDLL(path, mode=mode)
            except OSError as e:      # valid file, but not loadable here: rebuild it
                log.warning("relaxjax: cannot load cached %s (%s); compiling again", path, e)
        self.from_cache = self.lib is not None
        if self.lib is None:
            tm = target.pic_target_machine()
            mod = _optimize(text, tm)
            self._optimized = str(mod)
            data = target.link_shared(tm.emit_object(mod))
            path = cache.put("llvm", parts, data, ".so")
            if path is not None:
                self.lib = ctypes.CDLL(path, mode=mode)
            else:                     # cache not writable: load a private copy
                fd, path = tempfile.mkstemp(prefix="relaxjax-", suffix=".so")
                try:
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                    self.lib = ctypes.CDLL(path, mode=mode)
                finally:
                    os.unlink(path)
        self.path = path
        self.functions = {n: _SEGMENT(self.address(n)) for n in entry_names}

    def address(self, name: str) -> int:
        return ctypes.cast(getattr(self.lib, name), ctypes.c_void_p).value

    @property
    def optimized(self) -> str:
        """The optimised module text (computed again when the library came from the cache)."""
        if self._optimized is None:
            with _LOCK:
                self._optimized = str(_optimize(self.text, target.pic_target_machine()))
        return self._optimized

    def assembly(self) -> str:
        with _LOCK:
            return target.pic_target_machine().emit_assembly(llvm.parse_assembly(self.optimized))


def cache_key_parts(text: str) -> tuple:
    """The persistent-cache key of an LLVM module's machine code: its text, the target
    (triple, CPU, features, llvmlite and LLVM versions) and how it is compiled and linked."""
    return (text, target.target_id(), CODEGEN_VERSION, os.path.basename(target.linker()[0]))


def compile_llvm(text: str, entry_names: list, native: bool = False, exports: bool = False):
    """Compile once per distinct module text in this process: in memory with MCJIT, or
    (``native``) as a shared library through the persistent cache, whose symbols later
    libraries resolve when ``exports``."""
    key = (native, hashlib.sha256(text.encode()).hexdigest())
    with _LOCK:
        cm = _ENGINES.get(key)
        if cm is None:
            if native:
                _runtime_library()
            cm = _ENGINES[key] = SharedModule(text, entry_names, exports) if native \
                else CompiledModule(text, entry_names)
    return cm


def compile_kernel(f: PrimFunc, native: bool = False) -> tuple:
    """One loop-level program as its own LLVM module.  Its entry is exported under a name
    derived from the generated code, so equal programs in any function (whatever their
    buffers and dims are called) share one compiled kernel.  Returns (module, symbol, text)."""
    em = KernelEmitter(f, "@@SYM@@")
    body = em.emit()
    decls = {"declare void @GOMP_parallel(ptr, ptr, i32, i32)", "declare i32 @omp_get_thread_num()",
             "declare i32 @omp_get_num_threads()", "declare i64 @llvm.smax.i64(i64, i64)",
             "declare i64 @llvm.smin.i64(i64, i64)"}
    helpers = []
    for h in sorted(em.helpers_used, key=str):
        src = helper_source(h)
        decls |= {line for line in src.split("\n") if line.startswith("declare")}
        rest = "\n".join(line for line in src.split("\n") if not line.startswith("declare"))
        if rest.strip():
            helpers.append(rest)
    text = "\n\n".join(
        ["@rj_num_threads = external global i32\n@rj_parallel_min_work = external global i64",
         "\n".join(sorted(decls)), "\n".join(mathlib.declarations(em.math_used))] + helpers + [body] +
        ['attributes #0 = { nounwind }\nattributes #1 = { nounwind noinline "no-trapping-math"="true" }']) + "\n"
    sym = "rjk_" + hashlib.sha256(text.encode()).hexdigest()[:20]
    text = text.replace("@@SYM@@", sym)
    with _LOCK:
        hit = _KERNELS.get((native, sym))
    if hit is not None:
        return hit[0], sym, f"; {f.name}\n" + text
    cm = compile_llvm(text, [], native, exports=True)
    if not native:        # a shared library's symbols resolve through the dynamic linker
        llvm.add_symbol(sym, cm.address(sym))
    with _LOCK:
        _KERNELS[(native, sym)] = (cm, text)
    return cm, sym, f"; {f.name}\n" + text


def _python_library(b: Binding) -> bool:
    """Whether a library call runs as a Python host call (else natively in a segment)."""
    impl = lookup(b.callee.name)
    cpu = impl.cpu
    if cpu is BUILTIN or impl.cpu_native is not None:
        return False
    if cpu is None:
        raise impl.missing("llvm", "cpu")
    return True


class LLVMExecutable(Executable):
    backend = "llvm"

    def __init__(self, module: IRModule):
        target.init()
        check_object_layout()
        target.libmvec()
        if not target.libgomp():
            set_num_threads(1)
        _runtime_symbols()
        super().__init__(module)
        fn = self.fn
        self._plan(fn)
        self.native = native_code()
        if self.native:
            try:
                self.llvm_ir = self._emit()
            except (OSError, RuntimeError) as e:      # no usable linker or loader: MCJIT
                _NATIVE_FAILED.append(e)
                log.warning("relaxjax: shared-library code generation failed (%s); compiling in "
                            "memory without the persistent cache", e)
                self.native = False
        if not self.native:
            self.llvm_ir = self._emit()
        self._run = self._make_runner()

    # -- planning ------------------------------------------------------------------------
    def _plan(self, fn: Function) -> None:
        self.slot_of: dict = {}
        for p in fn.params:
            self.slot_of[p] = len(self.slot_of)
        dim_names: list = [s.name for s in fn.dim_vars]
        self.consts: dict = {}
        steps: list = []
        for b in fn.bindings:
            for a in b.args:
                if isinstance(a, Literal) and a not in self.slot_of and b.kind != "primitive":
                    self.slot_of[a] = len(self.slot_of)
                    self.consts[self.slot_of[a]] = _contiguous(np.asarray(a.value, a.type.dtype))
            for v in b.outvars:
                self.slot_of[v] = len(self.slot_of)
                for s in sorted(v.type.free_symbols(), key=lambda s: s.name):
                    if s.name not in dim_names:
                        dim_names.append(s.name)
            if b.kind == "primitive":
                steps.append(HostOp(b))
            elif b.kind == "library" and _python_library(b):
                steps.append(LibraryHostCall(b))
            else:
                if b.kind == "tir" and b.callee.host_checks:
                    steps.append(HostCheck(b))
                if not steps or not isinstance(steps[-1], Segment):
                    steps.append(Segment(f"seg{sum(isinstance(s, Segment) for s in steps)}"))
                steps[-1].calls.append(b)
        self.steps = steps
        self.segments = [s for s in steps if isinstance(s, Segment)]
        self.dim_names = dim_names
        self.dim_slot = {n: k for k, n in enumerate(dim_names)}

    def _emit(self) -> str:
        """Compile each distinct kernel once per process (its own LLVM module, named by a
        hash of its text, so equal kernels in different functions share machine code), then
        the segments that call them: in memory (MCJIT), or with ``self.native`` as shared
        libraries through the persistent cache.  Returns the full LLVM IR text for inspection."""
        kernels: dict = {}
        for seg in self.segments:
            for b in seg.calls:
                if b.kind == "tir" and id(b.callee) not in kernels:
                    kernels[id(b.callee)] = b.callee
        syms, texts, self.kernel_modules = {}, [], []
        for f in kernels.values():
            cm, sym, text = compile_kernel(f, self.native)
            syms[id(f)] = sym
            texts.append(text)
            self.kernel_modules.append(cm)
        parts, helpers = [], set()
        self.fallible = set()           # segments with native library calls (a status to check)
        for seg in self.segments:
            em = SegmentEmitter(seg, self.slot_of, self.dim_slot, syms)
            parts.append(em.emit())
            helpers |= em.helpers_used
            for sym, addr in em.natives.items():
                llvm.add_symbol(sym, addr)
            if em.natives:
                self.fallible.add(seg.name)
        decls = {f"declare void @{s}(ptr)" for s in syms.values()} | \
            {"declare i64 @llvm.smax.i64(i64, i64)"} | {h for h in helpers if isinstance(h, str)}
        seg_text = "\n\n".join([f"; relaxjax host segments of {self.fn.name}", "\n".join(sorted(decls))]
                                + parts) + "\n"
        # native library functions are process addresses: such segments stay in memory (MCJIT)
        self.segment_module = compile_llvm(seg_text, [s.name for s in self.segments],
                                           self.native and not self.fallible)
        return "\n\n".join(texts + [seg_text])

    # -- running ---------------------------------------------------------------------------
    def _make_runner(self):
        """Generate the per-call Python: read dims, allocate, call segments, run host ops."""
        g = {"np": np, "_empty": np.empty, "_asc": _contiguous, "_int64": np.int64,
             "_host": self._host_op, "_check": self._host_check, "_lib": self._library_call,
             "_liberr": self._library_error, "min": min, "max": max}
        self.pooling = POOLING
        self._stats = [0, 0, 0, 0, 0, None, None]
        self._tls = threading.local()
        mem = self._memory = _RunnerMemory(self, g) if self.pooling else None
        L = ["def _rj_run(D, arrays):"]
        names = self.dim_names
        local = {n: f"_d_{k}" for k, n in enumerate(names)}      # dims as Python locals
        bound = [s.name for s in self.fn.dim_vars]
        for n in bound:
            L.append(f"  {local[n]} = D[{n!r}]")
        L.append(f"  _dims = np.zeros({max(len(names), 1)}, _int64)")
        if bound:
            L.append(f"  _dims[:{len(bound)}] = [{', '.join(local[n] for n in bound)}]")
        L.append(f"  _b = [None] * {len(self.slot_of)}")
        for k in range(len(self.fn.params)):
            L.append(f"  _b[{k}] = _asc(arrays[{k}])")
        for k, c in self.consts.items():
            g[f"_c{k}"] = c
            L.append(f"  _b[{k}] = _c{k}")
        if mem is not None:
            L += mem.prologue(local)
        for si, st in enumerate(self.steps):
            if isinstance(st, (Segment, LibraryHostCall)):
                for b in (st.calls if isinstance(st, Segment) else [st.binding]):
                    for v in b.outvars:
                        shape = ", ".join(_rename(d, local) for d in v.type.shape)
                        shape = f"({shape}{',' if len(v.type.shape) == 1 else ''})"
                        g[f"_t{self.slot_of[v]}"] = v.type.dtype
                        if mem is not None:
                            L += mem.allocate(v, shape, local)
                        else:
                            L.append(f"  _b[{self.slot_of[v]}] = _empty({shape}, _t{self.slot_of[v]})")
                if isinstance(st, LibraryHostCall):
                    L.append(f"  _lib({si}, _b, D)")
                    continue
                g[f"_seg{si}"] = self.segment_module.functions[st.name]
                if st.name in self.fallible:
                    L.append(f"  _r = _seg{si}(tuple(_b), _dims)")
                    L.append(f"  if _r: _liberr({si}, _r)")
                else:
                    L.append(f"  _seg{si}(tuple(_b), _dims)")
            elif isinstance(st, HostCheck):
                L.append(f"  _check({si}, _b, D)")
            else:
                L.append(f"  _host({si}, _b, D, _dims)")
                for v in st.binding.outvars:        # dims the host op bound
                    for s in sorted(v.type.free_symbols(), key=lambda s: s.name):
                        L.append(f"  {local[s.name]} = D[{s.name!r}]")
        res = []
        for r in self.fn.results:
            if isinstance(r, Var):
                res.append(f"_b[{self.slot_of[r]}]")
            elif is_symbolic(r.value):
                g[f"_rt{len(res)}"] = r.type.dtype
                res.append(f"np.asarray({_rename(r.value, local)}, _rt{len(res)})")
            else:
                g[f"_r{len(res)}"] = np.asarray(r.value, r.type.dtype)
                res.append(f"_r{len(res)}")
        if mem is not None:
            L += mem.epilogue()
        L.append(f"  return [{', '.join(res)}]")
        self.python_source = "\n".join(L)
        exec(compile(self.python_source, f"<relaxjax host {self.fn.name}>", "exec"), g)  # noqa: S102
        return g["_rj_run"]

    def memory_stats(self, dims: dict | None = None) -> dict:
        """How calls use memory.  ``allocations_per_call``: NumPy allocations (intermediates
        and outputs, pool hits excluded) the last call made (None before the first call;
        approximate while several threads call at once).  ``intermediate_bytes``: the
        storages' total size, a symbolic expression as text, or an int given ``dims``
        (a dict dim name -> value).  ``workspace_bytes``: the plan's bound on the per-thread
        workspace (None when a storage is unbounded); ``mode`` says whether calls use it
        ("workspace") or size storages per call ("per-call"; also when the bound exceeds
        ``WORKSPACE_MAX_BYTES``)."""
        plan, st = self.memory_plan, self._stats
        out = {
            "pooling": self.pooling,
            "mode": ("off" if not self.pooling else "none" if not plan.storages else
                     "workspace" if self._memory.workspace else "per-call"),
            "calls": st[_CALLS],
            "allocations": st[_ALLOC_TMP] + st[_ALLOC_OUT],
            "allocations_per_call": None if st[_LAST_TMP] is None else st[_LAST_TMP] + st[_LAST_OUT],
            "intermediate_allocations_per_call": st[_LAST_TMP],
            "output_allocations_per_call": st[_LAST_OUT],
            **super().memory_stats(dims),
            "intermediate_bytes_expr": dim_str(plan.total_bytes),
            "unplanned_values": len(plan.unplanned),
            "workspace_bytes": plan.workspace_bytes,
            "pool_hits": st[_HITS],
            "pool_misses": st[_MISSES],
            "pool": POOL.stats(),
        }
        return out

    def _host_check(self, step: int, bufs: list, D: dict) -> None:
        b: Binding = self.steps[step].binding
        for kind, pos, size, axis in b.callee.host_checks:
            idx = bufs[self.slot_of[b.args[pos]]]
            n = _eval(size, D)
            if idx.size and (idx.min() < -n or idx.max() >= n):
                bad = idx.min() if idx.min() < -n else idx.max()
                raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {n}")

    def _library_call(self, step: int, bufs: list, D: dict) -> None:
        """A library call with a Python cpu implementation: ``f(*inputs, *outputs)``."""
        b: Binding = self.steps[step].binding
        impl = lookup(b.callee.name)
        args = [bufs[self.slot_of[a]] for a in list(b.args) + list(b.outvars)]
        status = impl.cpu_python(*args)
        if isinstance(status, (int, np.integer)) and not isinstance(status, bool) and status:
            impl.raise_status(status)

    def _library_error(self, step: int, r: int) -> None:
        """A segment stopped at a failing native library call: raise its error."""
        b: Binding = self.steps[step].calls[(r >> 32) - 1]
        status = ctypes.c_int32(r & 0xFFFFFFFF).value
        lookup(b.callee.name).raise_status(status)

    def _host_op(self, step: int, bufs: list, D: dict, dims) -> None:
        b: Binding = self.steps[step].binding
        name = b.callee.name
        args = [bufs[self.slot_of[a]] if isinstance(a, Var) else np.asarray(a.value, a.type.dtype)
                for a in b.args]
        out = b.outvars
        if name == "reshape":
            shape = tuple(_eval(d, D) for d in out[0].type.shape)
            bufs[self.slot_of[out[0]]] = args[0].reshape(shape)
            return
        if name == "match_cast":
            x = args[0]
            for ax, want in enumerate(out[0].type.shape):
                if not isinstance(want, int) and want.is_Symbol and want.name not in D:
                    D[want.name] = x.shape[ax]                       # binds a new dim
                    dims[self.dim_slot[want.name]] = x.shape[ax]
                elif _eval(want, D) != x.shape[ax]:
                    raise ShapeError(f"match_cast at {b.source}: axis {ax} has {x.shape[ax]}, "
                                     f"expected {dim_str(want)} = {_eval(want, D)}")
            bufs[self.slot_of[out[0]]] = x
            return
        # data-dependent ops: the reference implementation decides the size
        res = b.callee.impl(*args, **{k: (_eval(v, D) if is_symbolic(v) else v) for k, v in b.params.items()
                                      if k != "count"}, **({"count": None} if "count" in b.params else {}))
        res = list(res) if getattr(b.callee, "multiple_results", False) else [res]
        for v, r in zip(out, res):
            r = np.ascontiguousarray(r, v.type.dtype)
            for ax, d in enumerate(v.type.shape):
                if not isinstance(d, int) and d.is_Symbol and d.name not in D:
                    D[d.name] = r.shape[ax]
                    dims[self.dim_slot[d.name]] = r.shape[ax]
            bufs[self.slot_of[v]] = r

    def __call__(self, dims: dict, arrays: list) -> list:
        return self._run(dims, arrays)

    # -- inspection ------------------------------------------------------------------------
    def text_stages(self) -> dict:
        modules = self.kernel_modules + [self.segment_module]
        return {**super().text_stages(),
                "llvm": lambda: self.llvm_ir,
                "llvm-optimized": lambda: "\n\n".join(m.optimized for m in modules),
                "asm": lambda: "\n\n".join(m.assembly() for m in modules),
                "host": lambda: self.python_source}


class _RunnerMemory:
    """The memory part of the generated runner, from the executable's ``memory_plan``.

    * planned intermediates: views ``np.ndarray(shape, dtype, storage, offset)``.  With a
      workspace (the plan bounds every storage) the storages are fixed offsets in one block
      per executable and thread (``threading.local``), allocated at the thread's first call;
      the views of statically shaped values are made then too and reused.  Without one each
      storage is sized per call: large ones come from ``POOL`` and go back at the end of the
      call, small ones are not worth a view and their values get plain ``np.empty``.
    * values a result is (or views): ``np.empty`` when small; when large a pooled block
      wrapped by ``np.frombuffer(memoryview(block))`` (its base a memoryview, not an
      ndarray, so NumPy does not collapse the base of user views past it) and a weak
      reference whose callback returns the block once that array and every view of it are
      gone.
    * other binding outputs (shapes bound at run time): ``np.empty``.
    Allocations are counted into the executable's ``_stats``."""

    def __init__(self, exe: "LLVMExecutable", g: dict):
        self.exe, self.g = exe, g
        self.plan = plan = exe.memory_plan
        self.workspace = plan.workspace_bytes is not None and bool(plan.storages) and \
            plan.workspace_bytes <= WORKSPACE_MAX_BYTES
        self.static_view: dict = {}          # Var -> index into the per-thread tuple
        st, tls, pool = exe._stats, exe._tls, POOL
        nd, frombuffer, block = np.ndarray, np.frombuffer, _aligned_block
        if self.workspace:
            static = [v for v in plan.storage_of if all(isinstance(d, int) for d in v.type.shape)]
            self.static_view = {v: k + 1 for k, v in enumerate(static)}
            specs = [(tuple(v.type.shape), v.type.dtype, plan.storage_of[v].offset) for v in static]
            nbytes = max(plan.workspace_bytes, 1)

            def new_ws():
                ws = block(nbytes)
                w = (ws,) + tuple(nd(shape, dtype, ws, off) for shape, dtype, off in specs)
                tls.w = w
                st[_ALLOC_TMP] += 1
                return w
            g["_tls"], g["_new_ws"] = tls, new_ws

        def take(n, counter=_ALLOC_TMP):
            blk = pool.take(n)
            if blk is None:
                blk = block(n)
                st[_MISSES] += 1
                st[counter] += 1
            else:
                st[_HITS] += 1
            return blk

        def out(shape, dtype, n):
            blk = take(n, _ALLOC_OUT)
            # through a memoryview: np.frombuffer(ndarray) would make ``blk`` the base, and
            # views of the result would then keep ``blk`` alive but not ``flat``
            flat = frombuffer(memoryview(blk), dtype)
            pool.put_when_dead(flat, blk)
            return flat if len(shape) == 1 else flat.reshape(shape)

        def give(*blocks):
            for b in blocks:
                if b is not None:
                    pool.put(b)
        g.update(_st=st, _nd=nd, _take=take, _out=out, _give=give)

    def prologue(self, local: dict) -> list:
        L = [f"  _a0 = _st[{_ALLOC_TMP}]; _o0 = _st[{_ALLOC_OUT}]", "  _na = _no = 0"]
        self.sizes: dict = {}        # symbolic byte size over the input dims -> its local
        if self.workspace:
            return L + ["  try:", "    _W = _tls.w", "  except AttributeError:", "    _W = _new_ws()",
                        "  _ws = _W[0]"]
        inputs = set(self.exe.fn.dim_vars)
        for v in self.plan.unplanned:           # result sizes, computed once
            n = byte_size(v)
            if not isinstance(n, int) and free_symbols(n) <= inputs:
                self._size(n, local, L)
        groups: dict = {}
        for st in self.plan.storages:
            groups.setdefault(st.size, []).append(st)
        self.pooled = any(not isinstance(n, int) or n >= POOL_MIN_BYTES for n in groups)
        if self.pooled:
            L.append("  _pooled = False")
        for n, sts in groups.items():
            count = sum(len(st.values) for st in sts)
            take = [f"_s{st.index} = _take({self._size(n, local, L)})" for st in sts]
            none = [f"_s{st.index} = None" for st in sts] + [f"_na += {count}"]
            if isinstance(n, int):
                L.append("  " + "; ".join(take + ["_pooled = True"] if n >= POOL_MIN_BYTES else none))
            else:      # small ones are not worth a view: their values get np.empty
                L += [f"  if {self.sizes[n]} >= {POOL_MIN_BYTES}:", "    " + "; ".join(take + ["_pooled = True"]),
                      "  else:", "    " + "; ".join(none)]
        return L

    def _size(self, n, local: dict, L: list) -> str:
        if isinstance(n, int):
            return str(n)
        if n not in self.sizes:
            self.sizes[n] = f"_z{len(self.sizes)}"
            L.append(f"  {self.sizes[n]} = {_rename(n, local)}")
        return self.sizes[n]

    def allocate(self, v, shape: str, local: dict) -> list:
        k = self.exe.slot_of[v]
        plan = self.plan
        s = plan.storage_of.get(v)
        if s is not None:
            if self.workspace:
                if v in self.static_view:
                    return [f"  _b[{k}] = _W[{self.static_view[v]}]"]
                return [f"  _b[{k}] = _nd({shape}, _t{k}, _ws, {s.offset})"]
            if isinstance(s.size, int):
                return [f"  _b[{k}] = _empty({shape}, _t{k})" if s.size < POOL_MIN_BYTES else
                        f"  _b[{k}] = _nd({shape}, _t{k}, _s{s.index})"]
            return [f"  _b[{k}] = _empty({shape}, _t{k}) if _s{s.index} is None else "
                    f"_nd({shape}, _t{k}, _s{s.index})"]
        if v in plan.unplanned and plan.unplanned[v] != "shape bound at run time":
            n = byte_size(v)
            if isinstance(n, int):
                if n >= POOL_MIN_BYTES:
                    return [f"  _b[{k}] = _out({shape}, _t{k}, {n})"]
                return [f"  _b[{k}] = _empty({shape}, _t{k}); _no += 1"]
            L = []
            if n not in self.sizes:            # over dims bound while running: here
                L.append(f"  _n = {_rename(n, local)}")
            z = self.sizes.get(n, "_n")
            return L + [f"  if {z} >= {POOL_MIN_BYTES}:", f"    _b[{k}] = _out({shape}, _t{k}, {z})",
                        "  else:", f"    _b[{k}] = _empty({shape}, _t{k}); _no += 1"]
        return [f"  _b[{k}] = _empty({shape}, _t{k}); _na += 1"]

    def epilogue(self) -> list:
        L = []
        if not self.workspace and self.plan.storages and self.pooled:
            L.append(f"  if _pooled: _give({', '.join(f'_s{s.index}' for s in self.plan.storages)},)")
        L += [f"  _st[{_ALLOC_TMP}] += _na; _st[{_ALLOC_OUT}] += _no; _st[{_CALLS}] += 1",
              f"  _st[{_LAST_TMP}] = _st[{_ALLOC_TMP}] - _a0; _st[{_LAST_OUT}] = _st[{_ALLOC_OUT}] - _o0"]
        return L


def _contiguous(a: np.ndarray) -> np.ndarray:
    # (np.ascontiguousarray would turn a 0-d array into a 1-d one)
    return a if a.flags.c_contiguous else np.array(a, order="C")


def _rename(d, local: dict) -> str:
    if isinstance(d, int):
        return str(d)
    import sympy
    return dim_str(d.xreplace({s: sympy.Symbol(local[s.name], integer=True, nonnegative=True)
                               for s in free_symbols(d)}))


def _eval(d, D: dict) -> int:
    if isinstance(d, int):
        return d
    return eval_dim(d, D)            # compiled once per expression
