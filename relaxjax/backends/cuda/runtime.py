"""The CUDA backend's executable: the lowered graph function runs on the host as a list of
steps — kernel launches (``call_tir``, from ``codegen.emit_cuda``), cuBLAS matmuls
(``call_library``) and host operations (reshape views, ``match_cast`` checks, data-dependent
ops) — over device arrays.  Intermediates follow ``compile.memplan.plan_memory`` as on the
CPU: one device block per storage and call (from CuPy's pool), values are views of it.

Launch configuration comes from the dim values at each call: ``grid`` phases take
``ceil(items / threads_per_block)`` blocks, ``rows`` phases one block per row, both capped
at ``device.max_blocks`` (the kernels loop with grid strides over the rest)."""
from __future__ import annotations

import hashlib
import threading

import numpy as np

from ...compile.memplan import byte_size
from ...tir import Const, Load, Op, PrimFunc, Var as TVar
from ...errors import ShapeError
from ...ir import Binding, IRModule, Literal, Var, regions
from ...shapes import dim_str, eval_dim, is_symbolic
from ...lax.tir_interp import check_host
from ...tir.index_checks import ERROR_RECORD, data_index_checks, index_error
from ..control_flow import ControlFlowRunner, literal_value
from ..executable import Executable
from .codegen import emit_cuda
from .device import module_source

_KERNELS: dict = {}      # signature text of a PrimFunc -> CudaKernel (named by its source hash)


def kernel_for(f: PrimFunc):
    """The CUDA kernel of a loop-level program, named by a hash of its source so equal
    programs (whatever their buffers are called) share one compiled function."""
    key = f.signature_text()
    k = _KERNELS.get(key)
    if k is None:
        proto = emit_cuda(f, "RJ_KERNEL")
        sym = "rjk_" + hashlib.sha256(proto.source.encode()).hexdigest()[:20]
        k = emit_cuda(f, sym)
        _KERNELS[key] = k
    return k


def index_fn(e):
    """A Python function ``(D, L) -> int`` for a loop-level index expression over dims and
    elements of the kernel's buffers (a loop bound read from data: ``L(name, index)`` reads
    that element on the host)."""
    def src(x) -> str:
        if isinstance(x, Const):
            return str(int(x.value))
        if isinstance(x, TVar):
            return f"D[{x.name!r}]"
        if isinstance(x, Load):
            return f"L({x.buffer.name!r}, ({''.join(src(i) + ', ' for i in x.index)}))"
        assert isinstance(x, Op), x
        a = [src(y) for y in x.args]
        if x.name in ("max", "min"):
            return f"{x.name}({', '.join(a)})"
        sym = {"add": "+", "sub": "-", "mul": "*", "floor_div": "//", "rem": "%"}[x.name]
        return f"({a[0]} {sym} {a[1]})"
    return eval(f"lambda D, L=None: {src(e)}", {"max": max, "min": min, "__builtins__": {}})  # noqa: S307


class CudaExecutable(Executable):
    """Code generation happens here, with no GPU needed (``as_text("cuda")``); the device
    (``device_factory()``) is opened, the module compiled and constants uploaded at the
    first call."""

    backend = "cuda"

    def __init__(self, module: IRModule, device_factory):
        super().__init__(module)
        fn = self.fn
        self._device_factory = device_factory
        self.device = None
        self._ready = False
        kernels = {}
        for b in fn.bindings:
            if b.kind == "tir" and id(b.callee) not in kernels:
                kernels[id(b.callee)] = kernel_for(b.callee)
        self.kernels = kernels
        # control flow: each region is an executable of its own; its kernels show in this
        # module's source too (as_text("cuda"), the kernel tests)
        self.control = {id(b): ControlFlowRunner(b, lambda r: CudaExecutable(r, device_factory))
                        for b in fn.bindings if b.kind == "primitive" and regions(b)}
        unique = {k.phases[0].name: k for k in kernels.values()}
        for runner in self.control.values():
            for exe in runner.region_executables():
                unique.update({k.phases[0].name: k for k in exe.unique_kernels})
        self.unique_kernels = list(unique.values())
        self.source = module_source(self.unique_kernels)
        self._lock = threading.Lock()
        self._byte_sizes: dict = {}

    def _open(self) -> None:
        with self._lock:
            if self._ready:
                return
            device = self._device_factory()
            self.functions = device.load(self.unique_kernels) if self.unique_kernels else {}
            self.consts = {}
            for b in self.fn.bindings:
                for a in b.args:
                    if isinstance(a, Literal) and b.kind != "primitive" and id(a) not in self.consts:
                        self.consts[id(a)] = device.asarray(np.asarray(a.value, a.type.dtype))
            self.device = device
            self.steps = [self._step(b) for b in self.fn.bindings]
            self._ready = True

    # -- steps -----------------------------------------------------------------------------
    def _value(self, a, env: dict):
        if isinstance(a, Var):
            return env[a]
        return self.consts[id(a)] if id(a) in self.consts else np.asarray(a.value, a.type.dtype)

    def _alloc(self, v: Var, D: dict, env: dict, blocks: dict):
        shape = tuple(eval_dim(d, D) for d in v.type.shape)
        s = self.memory_plan.storage_of.get(v)
        if s is None:
            return self.device.empty(shape, v.type.dtype)
        blk = blocks.get(s.index)
        if blk is None:
            blk = blocks[s.index] = self.device.empty((max(eval_dim(s.size, D), 1),), np.uint8)
        n = self._byte_sizes.get(v)
        if n is None:                   # (sympy's arithmetic, once per value, not per call)
            n = self._byte_sizes[v] = byte_size(v)
        return blk[:eval_dim(n, D)].view(v.type.dtype).reshape(shape)

    def _step(self, b: Binding):
        dev = self.device
        if b.kind == "tir":
            k = self.kernels[id(b.callee)]
            f = b.callee
            phases = [(self.functions[ph.name], ph.mode, index_fn(ph.items), ph.partial_bytes)
                      for ph in k.phases]
            tpb, cap = dev.threads_per_block, dev.max_blocks
            checked = bool(data_index_checks(f))
            positions = {p.name: i for i, p in enumerate(f.params)}

            def run(D, env, blocks):
                for v in b.outvars:
                    env[v] = self._alloc(v, D, env, blocks)
                    if f.zero_outputs:
                        env[v][...] = 0
                self._host_checks(b, D, env)
                bufs = [self._value(a, env) for a in b.args] + [env[v] for v in b.outvars]
                dims = [D[d] for d in f.dim_vars]

                def load(name, index):          # an element a loop bound reads (a sync)
                    return int(bufs[positions[name]][index])
                extra = []
                # kernels checking indices read from data fill an error record (last parameter)
                err = dev.asarray(np.zeros(ERROR_RECORD, np.uint64)) if checked else None
                tail = [err] if checked else []
                for fn, mode, items, partial_bytes in phases:
                    n = items(D, load)
                    if mode == "partials":          # stage 1 of a full reduction: runs even when empty
                        grid = max(1, min(-(-n // tpb), cap))
                        extra = [dev.empty((partial_bytes * grid,), np.uint8), grid]
                        dev.launch(fn, grid, tpb, bufs, dims + extra + tail)
                        continue
                    if mode == "combine":
                        dev.launch(fn, 1, tpb, bufs, dims + extra + tail)
                        continue
                    if n <= 0:
                        continue
                    if mode == "grid" or mode == "threads":
                        grid, block = min(-(-n // tpb), cap), tpb
                    elif mode == "rows":
                        grid, block = min(n, cap), tpb
                    else:
                        grid, block = 1, 32
                    dev.launch(fn, grid, block, bufs, dims + tail)
                if checked:
                    record = dev.to_host(err).view(np.int64)
                    if record[0]:
                        raise index_error(f, record)
            return run
        if b.kind == "library":
            from .library import library_runner
            call = library_runner(b.callee.name, dev)

            def run(D, env, blocks):
                outs = []
                for v in b.outvars:
                    env[v] = self._alloc(v, D, env, blocks)
                    outs.append(env[v])
                call([self._value(x, env) for x in b.args], outs)
            return run
        name = b.callee.name
        if id(b) in self.control:       # control flow: a host loop over the regions' executables
            runner = self.control[id(b)]

            def run(D, env, blocks):
                for v, r in zip(b.outvars, runner(D, lambda v: env[v], dev.empty)):
                    env[v] = dev.asarray(r)
            return run
        if name == "reshape":
            def run(D, env, blocks):
                env[b.outvars[0]] = self._value(b.args[0], env).reshape(
                    tuple(eval_dim(d, D) for d in b.outvars[0].type.shape))
            return run
        if name == "match_cast":
            def run(D, env, blocks):
                x = self._value(b.args[0], env)
                for ax, want in enumerate(b.outvars[0].type.shape):
                    if is_symbolic(want) and want.is_Symbol and want.name not in D:
                        D[want.name] = x.shape[ax]
                    elif eval_dim(want, D) != x.shape[ax]:
                        raise ShapeError(f"match_cast at {b.source}: axis {ax} has {x.shape[ax]}, "
                                         f"expected {dim_str(want)} = {eval_dim(want, D)}")
                env[b.outvars[0]] = x
            return run

        def run(D, env, blocks):        # data-dependent: the reference implementation, on the host
            args = [dev.to_host(self._value(a, env)) for a in b.args]
            params = {k: (eval_dim(v, D) if is_symbolic(v) else v) for k, v in b.params.items() if k != "count"}
            if "count" in b.params:
                params["count"] = None
            res = b.callee.impl(*args, **params)
            res = list(res) if getattr(b.callee, "multiple_results", False) else [res]
            for v, r in zip(b.outvars, res):
                r = np.ascontiguousarray(r, v.type.dtype)
                for ax, d in enumerate(v.type.shape):
                    if is_symbolic(d) and d.is_Symbol and d.name not in D:
                        D[d.name] = r.shape[ax]
                env[v] = dev.asarray(r)
        return run

    def _host_checks(self, b: Binding, D: dict, env: dict) -> None:
        check_host(b.callee, lambda pos: self.device.to_host(self._value(b.args[pos], env)), D, eval_dim)

    # -- calls -----------------------------------------------------------------------------
    def __call__(self, dims: dict, arrays: list) -> list:
        if not self._ready:
            self._open()
        D = dict(dims)
        env = {p: self.device.asarray(a) for p, a in zip(self.fn.params, arrays)}
        blocks: dict = {}
        for step in self.steps:
            step(D, env, blocks)
        # NumPy arguments (backend="cuda" named): NumPy results, as the caller's code expects
        # of what it passed; device arguments keep every result on the device, constants too
        dev = self.device
        to_host = bool(arrays) and not any(dev.is_array(a) for a in arrays)
        out = []
        for r in self.fn.results:
            if isinstance(r, Var):
                out.append(dev.to_host(env[r]) if to_host else env[r])
            else:
                v = literal_value(r, D)
                out.append(v if to_host else dev.asarray(v))
        return out

    def text_stages(self) -> dict:
        return {**super().text_stages(), "cuda": lambda: self.source}
