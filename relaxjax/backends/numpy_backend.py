"""The reference backend: interprets the graph IR op by op with each primitive's NumPy
implementation, binding dims from the inputs and checking every result's shape and dtype
against its symbolic struct info.  Every other backend is tested against it."""
from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from ..errors import ShapeError
from ..ir import Binding, Function, IRModule, Literal, Var
from ..shapes import dim_str, is_symbolic
from . import register_backend

_GLOBALS = {"min": min, "max": max, "__builtins__": {}}


def _dim_eval(d):
    """A function ``dims -> int`` for one dim expression."""
    if isinstance(d, int):
        return lambda D, d=d: d
    code = compile(dim_str(d), "<dim>", "eval")
    return lambda D, code=code: eval(code, _GLOBALS, D)  # noqa: S307 (generated)


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
    __slots__ = ("impl", "args", "static_params", "dyn_params", "outs", "checks", "multi", "binding")


class NumpyExecutable:
    def __init__(self, module: IRModule):
        fn: Function = module.main
        self.fn = fn
        slot: dict = {}
        for p in fn.params:
            slot[p] = len(slot)
        self.n_params = len(fn.params)
        known = {s.name for s in fn.dim_vars}
        self.steps = []
        for b in fn.bindings:
            st = _Step()
            st.binding = b
            st.impl = b.callee.impl
            st.multi = getattr(b.callee, "multiple_results", False)
            st.args = [self._getter(a, slot) for a in b.args]
            data_dep = getattr(b.callee, "kind", "") == "data_dependent"
            st.static_params, st.dyn_params = {}, {}
            for k, v in b.params.items():
                f = None if data_dep else _param_eval(v)
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

    def __call__(self, dims: dict, arrays: list) -> list:
        env: list[Any] = [None] * self.n_slots
        env[:self.n_params] = arrays
        D = dict(dims)
        with np.errstate(all="ignore"):
            for st in self.steps:
                args = [g(env, D) for g in st.args]
                params = st.static_params
                if st.dyn_params:
                    params = {**params, **{k: f(D) for k, f in st.dyn_params.items()}}
                out = st.impl(*args, **params)
                outs = list(out) if st.multi else [out]
                for i, o, (t, axes) in zip(st.outs, outs, st.checks):
                    o = np.asarray(o)
                    if o.dtype != t.dtype or o.ndim != len(t.shape):
                        self._fail(st.binding, t, o, D)
                    for ax, name, f in axes:
                        if name is not None:
                            D[name] = o.shape[ax]
                        elif o.shape[ax] != f(D):
                            self._fail(st.binding, t, o, D)
                    env[i] = o
            return [g(env, D) for g in self.results]

    def as_text(self, stage: str) -> str:
        if stage == "optimized":
            return str(self.fn)
        raise ValueError(f"the numpy backend interprets the graph IR; it has no {stage!r} text "
                         f"(use backend='llvm' for loops, llvm and asm)")

    @staticmethod
    def _fail(b: Binding, t, o, D):
        dims = ", ".join(f"{k}={v}" for k, v in D.items())
        what = "match_cast" if b.callee.name == "match_cast" else f"{b.callee.name}"
        raise ShapeError(f"{what} at {b.source}: result has {o.dtype}{list(o.shape)}, expected {t} "
                         f"with {dims}")


register_backend("numpy", NumpyExecutable)
