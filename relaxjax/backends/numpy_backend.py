"""The reference backend: interprets the graph IR op by op with each primitive's NumPy
implementation, binding dims from the inputs and checking every result's shape and dtype
against its symbolic struct info.  Every other backend is tested against it.

It runs every module the pass pipeline can produce: besides graph primitives, a binding may
call a loop-level program (``call_tir``, run by the reference loop interpreter in
:mod:`relaxjax.lax.tir_interp`), a library function (``call_library``: the registered ``numpy``
implementation, see :mod:`relaxjax.library`) or a graph sub-function (a fused group), interpreted recursively."""
from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from ..tir import PrimFunc
from ..errors import ShapeError
from ..ir import Binding, Function, IRModule, Literal, Var, regions
from ..library import contiguous, lookup
from ..shapes import dim_str, free_symbols, is_symbolic
from .control_flow import ControlFlowRunner
from .executable import Executable
from .registry import register_backend
from ..lax.tir_interp import check_host, compile_primfunc

_GLOBALS = {"min": min, "max": max, "__builtins__": {}}



def _dim_eval(d):
    """A function ``dims -> int`` for one dim expression."""
    if isinstance(d, (int, np.integer)):
        return lambda D, d=int(d): d
    code = compile(dim_str(d), "<dim>", "eval")
    return lambda D, code=code: eval(code, _GLOBALS, D)  # noqa: S307 (generated)


_DIM_FNS: dict = {}


def _eval_dim(d, D) -> int:
    f = _DIM_FNS.get(d)
    if f is None:
        f = _DIM_FNS[d] = _dim_eval(d)
    return int(f(D))


def _param_eval(v):
    """Params with symbolic dims become a function of the dims; others stay constants."""
    if isinstance(v, (tuple, list)):
        fns = [_param_eval(x) for x in v]
        if all(f is None for f in fns):
            return None
        parts = [f if f is not None else (lambda D, x=x: x) for f, x in zip(fns, v)]
        return lambda D: tuple(p(D) for p in parts)
    if is_symbolic(v):
        return _dim_eval(v)
    return None


class _Step:
    __slots__ = ("call", "args", "static_params", "dyn_params", "outs", "checks", "binding")


class _FunctionInterp:
    """The interpreter of one graph function; ``subs`` shares callees' interpreters."""

    def __init__(self, fn: Function, subs: dict):
        self.fn = fn
        subs[id(fn)] = self
        slot: dict = {}
        for p in fn.params:
            slot[p] = len(slot)
        self.n_params = len(fn.params)
        known = {s.name for s in fn.dim_vars}
        self.steps = []
        for b in fn.bindings:
            st = _Step()
            st.binding = b
            st.call = self._caller(b, subs)
            st.args = [self._getter(a, slot) for a in b.args]
            data_dep = getattr(b.callee, "kind", "") == "data_dependent"
            st.static_params, st.dyn_params = {}, {}
            for k, v in b.params.items():
                f = None if data_dep or b.kind != "primitive" else _param_eval(v)
                if f is None:
                    st.static_params[k] = v
                else:
                    st.dyn_params[k] = f
            st.outs, st.checks = [], []
            for v in b.outvars:
                slot[v] = len(slot)
                st.outs.append(slot[v])
                axes = []
                for ax, d in enumerate(v.type.shape):
                    if isinstance(d, sympy.Symbol) and d.name not in known:
                        known.add(d.name)
                        axes.append((ax, d.name, None))            # binds a run-time dim
                    else:
                        axes.append((ax, None, _dim_eval(d)))
                st.checks.append((v.type, axes))
            self.steps.append(st)
        self.n_slots = len(slot)
        self.results = [self._getter(r, slot) for r in fn.results]
        # binding a callee's dims from its arguments: plain symbols first, then the rest
        self._param_binders = []
        self._param_checks = []
        plain = set()
        for k, p in enumerate(fn.params):
            for ax, d in enumerate(p.type.shape):
                if isinstance(d, sympy.Symbol) and d.name not in plain:
                    plain.add(d.name)
                    self._param_binders.append((d.name, k, ax))
                else:
                    self._param_checks.append((k, ax, d, _dim_eval(d)))
        self._solve = [s for s in fn.dim_vars if s.name not in plain]

    # -- construction ----------------------------------------------------------------------
    @staticmethod
    def _caller(b: Binding, subs: dict):
        """``call(args, params, D) -> list of results`` for one binding."""
        kind = b.kind
        if kind == "primitive" and regions(b):      # control flow: regions run as executables
            runner = ControlFlowRunner(b, NumpyExecutable)
            return lambda args, params, D: runner.run(D, args, np.empty)
        if kind == "primitive":
            impl = b.callee.impl
            if getattr(b.callee, "multiple_results", False):
                return lambda args, params, D: list(impl(*args, **params))
            return lambda args, params, D: [impl(*args, **params)]
        if kind == "tir":
            f: PrimFunc = b.callee
            prog = compile_primfunc(f)

            def call_tir(args, params, D):
                args = [np.asarray(a) for a in args]
                if f.host_checks:
                    check_host(f, args, D, _eval_dim)
                outs = prog.allocate_outputs(args, D)
                prog(args + outs, D)
                return outs
            return call_tir
        if kind == "library":
            impl = lookup(b.callee.name)
            if impl.numpy is None and impl.cpu_native is None:
                raise impl.missing("numpy", "numpy")
            outs = b.outvars

            def call_library(args, params, D):
                args = [contiguous(a) for a in args]
                res = [np.empty(tuple(_eval_dim(d, D) for d in v.type.shape), v.type.dtype)
                       for v in outs]
                impl.run_numpy(args, res)
                return res
            return call_library
        if kind == "function":
            callee: Function = b.callee
            sub = subs.get(id(callee)) or _FunctionInterp(callee, subs)
            return lambda args, params, D: sub.call(args, D)
        raise NotImplementedError(f"the numpy backend cannot run a {kind!r} binding")

    @staticmethod
    def _getter(a, slot):
        if isinstance(a, Var):
            i = slot[a]
            return lambda env, D, i=i: env[i]
        assert isinstance(a, Literal)
        if is_symbolic(a.value):
            f, dtype = _dim_eval(a.value), a.type.dtype
            return lambda env, D: np.asarray(f(D), dtype)
        value = np.asarray(a.value, a.type.dtype)
        return lambda env, D: value

    # -- running -----------------------------------------------------------------------------
    def call(self, arrays: list, outer: dict | None = None) -> list:
        """Run as a callee: dims are bound from the arguments' shapes (and checked).  A dim
        the arguments only show inside an expression (``b0 * b2``) takes the caller's value
        when the caller has it (fused groups share their caller's dims), else is solved for."""
        fn = self.fn
        if len(arrays) != len(fn.params):
            raise TypeError(f"@{fn.name} takes {len(fn.params)} arguments, got {len(arrays)}")
        arrays = [np.asarray(a) for a in arrays]
        for a, p in zip(arrays, fn.params):
            if a.dtype != p.type.dtype or a.ndim != p.type.ndim:
                raise ShapeError(f"@{fn.name}: argument of {a.dtype}{list(a.shape)} passed for "
                                 f"a parameter of type {p.type}")
        # a dim no argument shows (a fused group's ``t // n`` over scalars) is the caller's
        D: dict = dict(outer) if outer else {}
        for name, k, ax in self._param_binders:
            D[name] = arrays[k].shape[ax]
        # dims only seen inside expressions (2 * n) the caller does not give: solved for
        todo = [s for s in self._solve if not outer or s.name not in outer]
        while todo:
            s = next((s for s in todo if self._solve_dim(s, D, arrays)), None)
            if s is None:
                raise ShapeError(f"@{fn.name}: cannot bind dim {todo[0].name} from the "
                                 f"arguments' shapes")
            todo.remove(s)
        for k, ax, d, f in self._param_checks:
            if f(D) != arrays[k].shape[ax]:
                raise ShapeError(f"@{fn.name}: argument {k} has shape {list(arrays[k].shape)}, "
                                 f"expected {fn.params[k].type} with "
                                 f"{', '.join(f'{n}={v}' for n, v in D.items())}")
        return self.run(D, arrays)

    def _solve_dim(self, s, D: dict, arrays: list) -> bool:
        for k, ax, d, _ in self._param_checks:
            syms = free_symbols(d)
            if s in syms and all(x.name in D for x in syms - {s}):
                e = d.xreplace({x: sympy.Integer(D[x.name]) for x in syms - {s}})
                sol = [v for v in sympy.solve(sympy.Eq(e, arrays[k].shape[ax]), s)
                       if getattr(v, "is_integer", False)]
                if sol:
                    D[s.name] = int(sol[0])
                    return True
        return False

    def run(self, D: dict, arrays: list) -> list:
        env: list[Any] = [None] * self.n_slots
        env[:self.n_params] = arrays
        with np.errstate(all="ignore"):
            for st in self.steps:
                args = [g(env, D) for g in st.args]
                params = st.static_params
                if st.dyn_params:
                    params = {**params, **{k: f(D) for k, f in st.dyn_params.items()}}
                outs = st.call(args, params, D)
                if len(outs) != len(st.outs):
                    raise ShapeError(f"{_what(st.binding)} at {st.binding.source}: {len(outs)} "
                                     f"results, expected {len(st.outs)}")
                for i, o, (t, axes) in zip(st.outs, outs, st.checks):
                    o = np.asarray(o)
                    if o.dtype != t.dtype or o.ndim != len(t.shape):
                        _fail(st.binding, t, o, D)
                    for ax, name, f in axes:
                        if name is not None:
                            D[name] = o.shape[ax]
                        elif o.shape[ax] != f(D):
                            _fail(st.binding, t, o, D)
                    env[i] = o
            return [g(env, D) for g in self.results]


def _what(b: Binding) -> str:
    if b.kind == "tir":
        return f"call_tir({b.callee.name})"
    if b.kind == "library":
        return f"call_library({b.callee.name})"
    if b.kind == "function":
        return f"@{b.callee.name}"
    return "match_cast" if b.callee.name == "match_cast" else f"{b.callee.name}"


def _fail(b: Binding, t, o, D):
    dims = ", ".join(f"{k}={v}" for k, v in D.items())
    raise ShapeError(f"{_what(b)} at {b.source}: result has {o.dtype}{list(o.shape)}, expected {t} "
                     f"with {dims}")


class NumpyExecutable(Executable):
    """Interprets the graph IR (primitives by their reference implementations, fused groups
    as sub-functions, loop programs through the loop interpreter)."""
    backend = "numpy"
    runs_loops = False          # jit's default pipeline stops before Legalize for this backend

    def __init__(self, module: IRModule):
        super().__init__(module, lowered=False, plan=False)
        fn = self.fn
        self._subs: dict = {}
        self._interp = _FunctionInterp(fn, self._subs)
        self.steps = self._interp.steps

    def __call__(self, dims: dict, arrays: list) -> list:
        return self._interp.run(dict(dims), arrays)

    def _reachable(self):
        """Graph functions (main first) and loop programs the entry calls, in call order."""
        fns, progs, seen = [], [], set()

        def visit(f):
            if id(f) in seen:
                return
            seen.add(id(f))
            if isinstance(f, PrimFunc):
                progs.append(f)
                return
            fns.append(f)
            for b in f.bindings:
                if b.kind in ("tir", "function"):
                    visit(b.callee)
        visit(self.fn)
        return fns, progs

    def text_stages(self) -> dict:
        fns, progs = self._reachable()
        stages = {"optimized": lambda: "\n\n".join(str(f) for f in fns)}
        if progs:
            stages["loops"] = lambda: "\n\n".join(str(f) for f in progs)
        return stages

    def as_text(self, stage: str) -> str:
        if stage not in self.text_stages() and stage == "loops":
            raise ValueError("the numpy backend interprets the graph IR and this module has no "
                             "loop-level programs (run a pipeline with legalize, or use "
                             "backend='llvm')")
        if stage not in self.text_stages():
            raise ValueError(f"the numpy backend interprets the graph IR; it has no {stage!r} text "
                             f"(use backend='llvm' for loops, llvm and asm)")
        return super().as_text(stage)


register_backend("numpy", NumpyExecutable)
