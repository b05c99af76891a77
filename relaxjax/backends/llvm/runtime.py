"""The LLVM backend's executable: plan the host program (segments of kernel calls between
host operations), emit its LLVM module, compile it (``engine``), and run calls through a
generated Python function that sets up buffers (``runner_memory``) and calls each segment
once.  A built executable is stored whole in the persistent cache, and a later process
loads it without planning or emitting (``stored``)."""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from ...errors import ShapeError
from ...ir import Binding, Function, IRModule, Literal, Var, regions
from ...lax.tir_interp import check_host
from ...library import lookup, read_only
from ...shapes import dim_str, eval_dim, is_symbolic
from ..executable import Executable
from . import runner_memory, stored
from .buffer_pool import POOL
from .engine import (_NATIVE_FAILED, compile_llvm, generated_products, kernel_code, log,
                     module_with_kernels, native_code, prepare_process, set_native_pointers)
from .runner_memory import (_ALLOC_OUT, _ALLOC_TMP, _CALLS, _HITS, _LAST_OUT, _LAST_TMP, _MISSES,
                            RunnerMemory, _rename)
from ...tir.analysis import growing_input, inplace_input
from ...tir.families import families
from ...tir.index_checks import ERROR_RECORD, index_error
from .epilogue import epilogue_pairs
from .host import INDEX_ERROR, HostOp, LibraryHostCall, Segment, SegmentEmitter, python_library
from .native_loop import LLVMControlFlow


def _region_executable(module: IRModule) -> "LLVMExecutable":
    return LLVMExecutable(module, region=True)


class LLVMExecutable(Executable):
    backend = "llvm"
    # jit's pipeline runs a pointwise fori_loop as one program stepping cache-sized tiles
    pointwise_loops_in_cache = True
    # and a product reads an operand transposed with its last axis kept in place (its
    # segments pass CBLAS the rows' stride and each product's pointer: ``host._gemm``)
    strided_products = True

    def __init__(self, module: IRModule, region: bool = False):
        # a region (a loop body, a branch) runs its segments many times per call: they are
        # optimised; a function's own segments run once per call, a list of kernel and
        # library calls that LLVM's optimiser only makes slower to compile (optnone)
        self.region = region
        prepare_process()
        super().__init__(module)
        fn = self.fn
        self._plan(fn)
        self.native = native_code()
        if self.native:
            try:
                self._llvm_ir = self._emit()
            except (OSError, RuntimeError) as e:      # no usable linker or loader: MCJIT
                _NATIVE_FAILED.append(e)
                log.warning("relaxjax: shared-library code generation failed (%s); compiling in "
                            "memory without the persistent cache", e)
                self.native = False
        if not self.native:
            self._llvm_ir = self._emit()
        self._run = self._make_runner()

    # -- the persistent cache (see ``stored``) ----------------------------------------------
    @staticmethod
    def cache_key() -> tuple | None:
        """What decides a stored executable besides the lowered module; None when
        executables are not stored (in-memory code)."""
        return stored.cache_key()

    def to_cache(self) -> bytes | None:
        """This executable as one persistent-cache payload, or None when it cannot be stored."""
        return stored.dump(self)

    @classmethod
    def from_cache(cls, data: bytes) -> "LLVMExecutable":
        """An executable from :meth:`to_cache`'s payload, without planning or emitting."""
        return stored.load(cls, data)

    @property
    def llvm_ir(self) -> str:
        """The LLVM module's text (emitted again on demand for a stored executable)."""
        if self._llvm_ir is None:
            self._llvm_ir = self._module_text()[0]
        return self._llvm_ir

    # -- planning ------------------------------------------------------------------------
    def _plan(self, fn: Function) -> None:
        self.slot_of: dict = {}
        for p in fn.params:
            self.slot_of[p] = len(self.slot_of)
        dim_names: list = [s.name for s in fn.dim_vars]
        self.consts: dict = {}
        self.control: dict = {}
        steps: list = []
        views = _segment_views(fn)
        for b in fn.bindings:
            if b in views:              # a reshape only segments read: the operand's slot
                self.slot_of[b.outvars[0]] = self.slot_of[b.args[0]]
                continue
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
                if regions(b):          # control flow: its regions compile as executables
                    self.control[id(b)] = LLVMControlFlow(b, _region_executable)
            elif b.kind == "library" and python_library(b):
                steps.append(LibraryHostCall(b))
            else:                       # (gather index checks run in the segment)
                if not steps or not isinstance(steps[-1], Segment):
                    steps.append(Segment(f"seg{sum(isinstance(s, Segment) for s in steps)}"))
                steps[-1].calls.append(b)
        self.steps = steps
        self.segments = [s for s in steps if isinstance(s, Segment)]
        self.dim_names = dim_names
        self.dim_slot = {n: k for k, n in enumerate(dim_names)}

    def _module_text(self) -> tuple:
        """The LLVM module of the executable's kernels (each distinct one once) and segments:
        (its text, the segments with a status to check, the native library functions the
        segments call by address: LLVM symbol -> address)."""
        kernels: dict = {}
        for seg in self.segments:
            for b in seg.calls:
                if b.kind == "tir" and id(b.callee) not in kernels:
                    kernels[id(b.callee)] = b.callee
        # kernels equal but for some numbers (complex parts, unrolled stages): one code each
        family = families(list(kernels.values()), lambda g: kernel_code(g).symbol) \
            if len(kernels) > 1 else {}
        # programs that run on a generated product's tiles (``epilogue``): code with a tile
        # function (not those sharing a family's code)
        pairs = epilogue_pairs(self.segments, self.fn, self.memory_plan, frozenset(family)) \
            if generated_products() else {}
        tiled = {id(b.callee) for b in pairs.values()}
        codes, extra = {}, {}
        for k, f in kernels.items():
            if k in family:
                program, extra[k] = family[k]
                f = program
            codes[k] = kernel_code(f, tiles=k in tiled)
        syms = {k: c.symbol for k, c in codes.items()}
        parts, helpers = [], set()
        fallible = set()                # segments with a status to check
        natives: dict = {}
        for seg in self.segments:
            em = SegmentEmitter(seg, self.slot_of, self.dim_slot, syms, extra, optimize=self.region,
                                 generated_products=generated_products(), epilogues=pairs)
            parts.append(em.emit())
            helpers |= em.helpers_used
            natives.update(em.natives)
            if em.natives or em.checked:
                fallible.add(seg.name)
        decls = {"declare i64 @llvm.smax.i64(i64, i64)"} | {h for h in helpers if isinstance(h, str)}
        text = module_with_kernels(list(codes.values()), decls, parts,
                                   f"relaxjax kernels and host segments of {self.fn.name}")
        return text, fallible, natives

    def _emit(self) -> str:
        """Emit the module and compile it: in memory (MCJIT), or with ``self.native`` as a
        shared library through the persistent cache.  Returns its text, for inspection."""
        text, self.fallible, self.natives = self._module_text()
        self.segment_module = compile_llvm(text, [s.name for s in self.segments], self.native)
        set_native_pointers(self.segment_module, self.natives)
        return text

    # -- running ---------------------------------------------------------------------------
    def _runner_globals(self) -> dict:
        """The generated runner's globals that live in this process: functions, the memory
        closures, the segments' entry points, the constants."""
        g = {"np": np, "_empty": np.empty, "_asc": _contiguous, "_int64": np.int64, "_donatable": _donatable, "_grow": _grow,
             "_shared_owners": _shared_owners,
             "_host": self._host_op, "_lib": self._library_call,
             "_liberr": self._library_error, "min": min, "max": max}
        self._stats = [0, 0, 0, 0, 0, None, None]
        self._tls = threading.local()
        self._memory = RunnerMemory(self, g) if self.pooling else None
        for si, st in enumerate(self.steps):
            if isinstance(st, Segment):
                g[f"_seg{si}"] = self.segment_module.functions[st.name]
        for k, c in self.consts.items():
            g[f"_c{k}"] = c
        return g

    def _make_runner(self):
        """Generate the per-call Python (``_runner_source``), compile it and bind it."""
        self.pooling = runner_memory.POOLING      # read per build (tests switch it)
        g = self._runner_globals()
        self.python_source, self._runner_data = self._runner_source()
        self._runner_code = compile(self.python_source, f"<relaxjax host {self.fn.name}>", "exec")
        return self._bind_runner(g)

    def _bind_runner(self, g: dict):
        g.update(self._runner_data)
        exec(self._runner_code, g)  # noqa: S102
        return g["_rj_run"]

    def _runner_source(self) -> tuple:
        """The per-call Python: read dims, allocate, call segments, run host ops.  Returns
        (source, the values it names that depend on nothing of the process: dtypes and
        result constants)."""
        data: dict = {}
        mem = self._memory
        L = ["def _rj_run(D, arrays):"]
        names = self.dim_names
        local = {n: f"_d_{k}" for k, n in enumerate(names)}      # dims as Python locals
        bound = [s.name for s in self.fn.dim_vars]
        for n in bound:
            L.append(f"  {local[n]} = D[{n!r}]")
        L.append(f"  _dims = np.zeros({len(names) + ERROR_RECORD}, _int64)")     # dims, error record
        if bound:
            L.append(f"  _dims[:{len(bound)}] = [{', '.join(local[n] for n in bound)}]")
        L.append(f"  _b = [None] * {len(self.slot_of)}")
        for k in range(len(self.fn.params)):
            L.append(f"  _b[{k}] = _asc(arrays[{k}])")
        for k in self.consts:
            L.append(f"  _b[{k}] = _c{k}")
        if mem is not None:
            L += mem.prologue(local)
        donors, growers = self._donors()
        if mem is None:
            growers = {}
        if donors or growers:
            L.append("  _sh = _shared_owners(arrays)")
        for si, st in enumerate(self.steps):
            if isinstance(st, (Segment, LibraryHostCall)):
                for b in (st.calls if isinstance(st, Segment) else [st.binding]):
                    for v in b.outvars:
                        shape = ", ".join(_rename(d, local) for d in v.type.shape)
                        shape = f"({shape}{',' if len(v.type.shape) == 1 else ''})"
                        data[f"_t{self.slot_of[v]}"] = v.type.dtype
                        if mem is not None:
                            alloc = mem.allocate(v, shape, local)
                        else:
                            alloc = [f"  _b[{self.slot_of[v]}] = _empty({shape}, _t{self.slot_of[v]})"]
                        if v in donors:             # the donated argument's array, when it may be
                            k = self.slot_of[donors[v]]
                            L += [f"  if _donatable(_b[{k}], arrays, {k}, _sh):",
                                  f"    _b[{self.slot_of[v]}] = _b[{k}]", "  else:", *("  " + line for line in alloc)]
                        elif v in growers:          # its memory, when it has room (else new, with room)
                            (p, axis), j = growers[v], self.slot_of[v]
                            k = self.slot_of[p]
                            L += [f"  _g = _grow(_b[{k}], arrays, {k}, _sh, {shape}, {axis}, _t{j})",
                                  f"  _b[{j}] = _g if _g is not None else _out_room({shape}, _t{j})"]
                        else:
                            L += alloc
                if isinstance(st, LibraryHostCall):
                    L.append(f"  _lib({si}, _b, D)")
                    continue
                if st.name in self.fallible:
                    L.append(f"  _r = _seg{si}(tuple(_b), _dims)")
                    L.append(f"  if _r: _liberr({si}, _r, _b, D, _dims)")
                else:
                    L.append(f"  _seg{si}(tuple(_b), _dims)")
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
                data[f"_rt{len(res)}"] = r.type.dtype
                res.append(f"np.asarray({_rename(r.value, local)}, _rt{len(res)})")
            else:
                data[f"_r{len(res)}"] = np.asarray(r.value, r.type.dtype)
                res.append(f"_r{len(res)}")
        if mem is not None:
            L += mem.epilogue()
        L.append(f"  return [{', '.join(res)}]")
        return "\n".join(L), data

    def _donors(self) -> tuple[dict, dict]:
        """Results to write into a donated parameter's array (``jit``'s ``donate_argnums``):
        result -> parameter, where a program updates the parameter in place into the result
        (``tir.analysis.inplace_input``) and nothing else reads the parameter; the program
        then stores only what it changes (``codegen``: ``update_region``).  And results
        that may grow a donated parameter's memory: result -> (parameter, axis), a
        concatenation onto it (``tir.analysis.growing_input``; ``_grow`` decides per call)."""
        fn = self.fn
        donated = {fn.params[k] for k in fn.attrs.get("donated", ())}
        if not donated:
            return {}, {}
        uses = fn.uses()
        results = [r for r in fn.results if isinstance(r, Var)]
        planned = self.memory_plan.storage_of if self.memory_plan is not None else {}
        out, grow = {}, {}
        for b in fn.bindings:
            if b.kind != "tir" or len(b.outvars) != 1:
                continue
            r = b.outvars[0]
            if r not in results or r in planned or r in out or r in grow:
                continue
            j = inplace_input(b.callee)
            if j is not None:
                p = b.args[j]
                if p in donated and len(uses.get(p, ())) == 1 and p not in results and p.type == r.type:
                    out[r] = p
                    donated.discard(p)
                continue
            g = growing_input(b.callee)
            if g is not None:
                p = b.args[g[0]]
                if p in donated and len(uses.get(p, ())) == 1 and p not in results:
                    grow[r] = (p, g[1])
                    donated.discard(p)
        return out, grow

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

    def _check_host(self, b: Binding, bufs: list, D: dict) -> None:
        """NumPy's error for a failing host check: a gather index out of range (IndexError,
        naming it), an empty axis of a reduction without identity (ValueError)."""
        check_host(b.callee, lambda pos: bufs[self.slot_of[b.args[pos]]], D, _eval)

    def _library_call(self, step: int, bufs: list, D: dict) -> None:
        """A library call with a Python cpu implementation: ``f(*inputs, *outputs)``."""
        b: Binding = self.steps[step].binding
        impl = lookup(b.callee.name)
        args = [read_only(bufs[self.slot_of[a]]) for a in b.args] + [bufs[self.slot_of[v]] for v in b.outvars]
        status = impl.cpu_python(*args)
        if isinstance(status, (int, np.integer)) and not isinstance(status, bool) and status:
            impl.raise_status(status)

    def _library_error(self, step: int, r: int, bufs=None, D=None, dims=None) -> None:
        """A segment stopped at a failing native library call, a failing host check or an
        index read from data out of range (its error record follows the dims): raise its
        error."""
        b: Binding = self.steps[step].calls[((r & ~INDEX_ERROR) >> 32) - 1]
        if r & INDEX_ERROR:
            record = None if dims is None else dims[len(self.dim_names):]
            if record is not None and record[0]:
                raise index_error(b.callee, record)
            self._check_host(b, list(bufs), D)     # names the index, axis and size
            # (a native loop's failing iteration read another carry than the buffers given)
            raise IndexError(f"an index is out of bounds in {b.callee.name}")
        status = ctypes.c_int32(r & 0xFFFFFFFF).value
        lookup(b.callee.name).raise_status(status)

    def _host_op(self, step: int, bufs: list, D: dict, dims) -> None:
        b: Binding = self.steps[step].binding
        name = b.callee.name
        control = self.control.get(id(b))
        if control is not None:
            outs = control(D, lambda v: bufs[self.slot_of[v]], np.empty)
            for v, r in zip(b.outvars, outs):
                bufs[self.slot_of[v]] = _contiguous(np.asarray(r))
            return
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
    def _module_with_text(self):
        """The compiled module, its text known (emitted again for a stored executable's)."""
        m = self.segment_module
        if m.text is None:
            m.text = self.llvm_ir
        return m

    def text_stages(self) -> dict:
        # (the kernels are in the one module)
        return {**super().text_stages(),
                "llvm": lambda: self.llvm_ir,
                "llvm-optimized": lambda: self._module_with_text().optimized,
                "asm": lambda: self._module_with_text().assembly(),
                "host": lambda: self.python_source}


def _segment_views(fn: Function) -> set:
    """The ``reshape`` bindings that need no host step: every buffer of a call is
    C-contiguous, so a reshape is its operand's memory, and where only native code reads it
    (no host operation, Python library call or result needs the array's own shape) it can
    take the operand's slot, and the segments before and after it become one."""
    python_uses = {r for r in fn.results if isinstance(r, Var)}
    for b in fn.bindings:
        if b.kind == "primitive" or (b.kind == "library" and python_library(b)):
            python_uses.update(a for a in b.args if isinstance(a, Var))
    return {b for b in fn.bindings
            if b.kind == "primitive" and b.callee.name == "reshape" and not regions(b)
            and isinstance(b.args[0], Var) and b.outvars[0] not in python_uses}


def _owner(a):
    """The object that owns ``a``'s memory: the end of its chain of bases, through the
    memoryviews results from the pool are wrapped in (``RunnerMemory.out``), so that those
    are told apart by their blocks rather than compared pairwise with every argument."""
    while True:
        if isinstance(a, np.ndarray):
            if a.base is None:
                return a
            a = a.base
        elif isinstance(a, memoryview):
            a = a.obj
        else:
            return a


def _shared_owners(arrays) -> set:
    """The positions of the arguments whose memory another argument may share (computed
    once per call that donates): arrays of one owning array, and, for memory NumPy does
    not own (``frombuffer`` over one buffer), those ``may_share_memory`` says overlap."""
    first, out, foreign = {}, set(), []
    for j, b in enumerate(arrays):
        if not isinstance(b, np.ndarray):
            continue
        o = _owner(b)
        if not isinstance(o, np.ndarray):
            foreign.append(j)
        k = first.setdefault(id(o), j)
        if k != j:
            out.update((j, k))
    for j in foreign:
        for i, b in enumerate(arrays):
            if i != j and isinstance(b, np.ndarray) and np.may_share_memory(arrays[j], b):
                out.update((i, j))
    return out


def _donatable(buf: np.ndarray, arrays, k: int, shared: set) -> bool:
    """Whether argument ``k``'s buffer (``buf``: the array passed, or its contiguous copy)
    may be written over by a result: a copy is ours; the caller's array must be writeable
    and share no memory with another argument (``shared``: ``_shared_owners``), which the
    call still reads."""
    a = arrays[k]
    if buf is not a:
        return True
    return type(a) is np.ndarray and a.flags.writeable and k not in shared


def _grow(buf: np.ndarray, arrays, k: int, shared: set, shape: tuple, axis: int, dtype):
    """Argument ``k``'s memory as the result of ``shape`` (longer than it along ``axis``),
    or None: it must be donatable (``_donatable``), its dims before ``axis`` 1 (so its
    elements keep their places in the longer array) and its block from the pool long
    enough (``BufferPool.grow``)."""
    if any(d != 1 for d in shape[:axis]) or not _donatable(buf, arrays, k, shared):
        return None
    return POOL.grow(buf, shape, dtype)


def _contiguous(a: np.ndarray) -> np.ndarray:
    # (np.ascontiguousarray would turn a 0-d array into a 1-d one)
    return a if a.flags.c_contiguous else np.array(a, order="C")


def _eval(d, D: dict) -> int:
    if isinstance(d, int):
        return d
    return eval_dim(d, D)            # compiled once per expression
