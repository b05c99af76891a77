"""The LLVM backend's executable: plan the host program, emit one LLVM module (kernels and
segments), optimise it at O3 for the host CPU, JIT it with MCJIT, and run calls through a
generated Python function that allocates buffers and calls each segment once."""
from __future__ import annotations

import ctypes
import hashlib
import threading

import llvmlite.binding as llvm
import numpy as np

from ...compile.legalize import HOST_OPS, legalize
from ...compile.passes import run_pipeline
from ...compile.tir import PrimFunc
from ...errors import ShapeError
from ...ir import Binding, Function, IRModule, Literal, Var
from ...shapes import dim_str, free_symbols, is_symbolic
from . import mathlib, target
from .codegen import KernelEmitter, helper_source
from .host import HostCheck, HostOp, Segment, SegmentEmitter, check_object_layout

# Process-wide knobs read by every kernel: thread count (0 = OpenMP's default) and the work
# (elements touched) below which a kernel stays on the calling thread.
NUM_THREADS = ctypes.c_int32(0)
PARALLEL_MIN_WORK = ctypes.c_int64(1 << 15)

_SEGMENT = ctypes.CFUNCTYPE(None, ctypes.py_object, ctypes.py_object)
_ENGINES: dict = {}
_KERNELS: dict = {}
_LOCK = threading.Lock()


def set_num_threads(n: int) -> None:
    """Threads for parallel loops (0: OpenMP's default, one per core)."""
    NUM_THREADS.value = int(n)


def set_parallel_threshold(work: int) -> None:
    """Kernels touching fewer elements than this run on the calling thread."""
    PARALLEL_MIN_WORK.value = int(work)


def _runtime_symbols() -> None:
    llvm.add_symbol("rj_num_threads", ctypes.addressof(NUM_THREADS))
    llvm.add_symbol("rj_parallel_min_work", ctypes.addressof(PARALLEL_MIN_WORK))


class CompiledModule:
    """An LLVM module optimised and JIT-compiled; ``functions[name]`` are ctypes callables."""

    def __init__(self, text: str, entry_names: list):
        target.init()
        self.text = text
        mod = llvm.parse_assembly(text)
        mod.verify()
        tm = target.target_machine()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        self.optimized = str(mod)
        self.engine = llvm.create_mcjit_compiler(mod, tm)
        self.engine.finalize_object()
        self.functions = {n: _SEGMENT(self.engine.get_function_address(n)) for n in entry_names}

    def assembly(self) -> str:
        mod = llvm.parse_assembly(self.optimized)
        return target.target_machine().emit_assembly(mod)


def compile_llvm(text: str, entry_names: list) -> CompiledModule:
    """Compile once per distinct module text in this process."""
    key = hashlib.sha256(text.encode()).hexdigest()
    with _LOCK:
        cm = _ENGINES.get(key)
        if cm is None:
            cm = _ENGINES[key] = CompiledModule(text, entry_names)
    return cm


def compile_kernel(f: PrimFunc) -> tuple[CompiledModule, str, str]:
    """One loop-level program as its own LLVM module.  Its entry is exported under a name
    derived from the generated code, so equal programs in any function (whatever their
    buffers and dims are called) share one compiled kernel."""
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
        hit = _KERNELS.get(sym)
    if hit is not None:
        return hit[0], sym, f"; {f.name}\n" + text
    cm = compile_llvm(text, [])
    llvm.add_symbol(sym, cm.engine.get_function_address(sym))
    with _LOCK:
        _KERNELS[sym] = (cm, text)
    return cm, sym, f"; {f.name}\n" + text


def _has_unlowered(fn: Function) -> bool:
    return any(b.kind == "primitive" and b.callee.name not in HOST_OPS for b in fn.bindings)


class LLVMExecutable:
    def __init__(self, module: IRModule):
        target.init()
        check_object_layout()
        target.libmvec()
        if not target.libgomp():
            set_num_threads(1)
        _runtime_symbols()
        if _has_unlowered(module.main):       # the backend needs loops: lower what is left
            module = run_pipeline(module, [legalize], dump_input=False)
        self.module = module
        fn = module.main
        self.fn = fn
        self._plan(fn)
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
                    self.consts[self.slot_of[a]] = np.ascontiguousarray(a.value, a.type.dtype)
            for v in b.outvars:
                self.slot_of[v] = len(self.slot_of)
                for s in sorted(v.type.free_symbols(), key=lambda s: s.name):
                    if s.name not in dim_names:
                        dim_names.append(s.name)
            if b.kind == "primitive":
                steps.append(HostOp(b))
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
        the segments that call them.  Returns the full LLVM IR text for inspection."""
        kernels: dict = {}
        for seg in self.segments:
            for b in seg.calls:
                if b.kind == "tir" and id(b.callee) not in kernels:
                    kernels[id(b.callee)] = b.callee
        syms, texts, self.kernel_modules = {}, [], []
        for f in kernels.values():
            cm, sym, text = compile_kernel(f)
            syms[id(f)] = sym
            texts.append(text)
            self.kernel_modules.append(cm)
        parts, helpers = [], set()
        for seg in self.segments:
            em = SegmentEmitter(seg, self.slot_of, self.dim_slot, syms)
            parts.append(em.emit())
            helpers |= em.helpers_used
        decls = {f"declare void @{s}(ptr)" for s in syms.values()} | \
            {"declare i64 @llvm.smax.i64(i64, i64)"} | {h for h in helpers if isinstance(h, str)}
        seg_text = "\n\n".join([f"; relaxjax host segments of {self.fn.name}", "\n".join(sorted(decls))]
                                + parts) + "\n"
        self.segment_module = compile_llvm(seg_text, [s.name for s in self.segments])
        return "\n\n".join(texts + [seg_text])

    # -- running ---------------------------------------------------------------------------
    def _make_runner(self):
        """Generate the per-call Python: read dims, allocate, call segments, run host ops."""
        g = {"np": np, "_empty": np.empty, "_asc": _contiguous, "_int64": np.int64,
             "_host": self._host_op, "_check": self._host_check, "min": min, "max": max}
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
        for si, st in enumerate(self.steps):
            if isinstance(st, Segment):
                for b in st.calls:
                    for v in b.outvars:
                        shape = ", ".join(_rename(d, local) for d in v.type.shape)
                        g[f"_t{self.slot_of[v]}"] = v.type.dtype
                        L.append(f"  _b[{self.slot_of[v]}] = _empty(({shape}{',' if len(v.type.shape) == 1 else ''}), "
                                 f"_t{self.slot_of[v]})")
                g[f"_seg{si}"] = self.segment_module.functions[st.name]
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
        L.append(f"  return [{', '.join(res)}]")
        self.python_source = "\n".join(L)
        exec(compile(self.python_source, f"<relaxjax host {self.fn.name}>", "exec"), g)  # noqa: S102
        return g["_rj_run"]

    def _host_check(self, step: int, bufs: list, D: dict) -> None:
        b: Binding = self.steps[step].binding
        for kind, pos, size, axis in b.callee.host_checks:
            idx = bufs[self.slot_of[b.args[pos]]]
            n = _eval(size, D)
            if idx.size and (idx.min() < -n or idx.max() >= n):
                bad = idx.min() if idx.min() < -n else idx.max()
                raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {n}")

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
    def as_text(self, stage: str) -> str:
        if stage == "optimized":
            return "\n\n".join(str(f) for f in self.module.functions.values() if isinstance(f, Function))
        if stage == "loops":
            return "\n\n".join(str(f) for f in self.module.functions.values() if isinstance(f, PrimFunc))
        if stage == "llvm":
            return self.llvm_ir
        if stage == "llvm-optimized":
            return "\n\n".join(m.optimized for m in self.kernel_modules + [self.segment_module])
        if stage == "asm":
            return "\n\n".join(m.assembly() for m in self.kernel_modules + [self.segment_module])
        if stage == "host":
            return self.python_source
        raise ValueError(f"unknown stage {stage!r}; one of: optimized, loops, llvm, llvm-optimized, asm, host")


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
    return int(eval(dim_str(d), {"min": min, "max": max, "__builtins__": {}}, D))  # noqa: S307
