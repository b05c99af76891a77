"""Primitives, tracers and the trace context: ``bind`` is the single interception point.

``bind(prim, *args, **params)`` either evaluates the primitive's reference implementation on
NumPy arrays (eager mode, no tracer among the arguments) or records a binding in the active
:class:`TraceContext` and returns tracers whose struct info the primitive's shape and dtype
rules deduced.
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Any, Callable, Sequence

import numpy as np
import sympy

from . import dtypes as dt
from .errors import ShapeError, TracerConversionError
from .ir import Binding, Function, Literal, TensorType, Var, regions
from .shapes import INF, ShapeEnv, SymbolicDim, is_symbolic, normalize, prod, use_env, wrap_dim

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _primitive(name: str) -> "Primitive":
    return PRIMITIVES[name]


class Primitive:
    """A graph-level operation, with everything that defines it in one place.

    * ``shape_rule(env, *types, **params)`` -> output shape (or list of shapes);
      proves the relations it needs through ``env``;
    * ``dtype_rule(*types, **params)`` -> output dtype (or list);
    * ``impl(*arrays, **params)`` -> NumPy result(s): the reference semantics;
    * ``kind``: how fusion will see it (elementwise, broadcast, injective, reduction, control,
      output_fusable, opaque, data_dependent);
    * ``complex_rule(*args, **params)``: the primitive on complex operands in terms of real
      ones, for SplitComplex (``relaxjax.compile.split_complex``), which runs it in a trace:
      each complex operand comes as a :class:`~relaxjax.lax.complex_parts.Parts` (real and
      imaginary tracers), each real one as a tracer; it returns Parts for a complex result,
      a tracer for a real one (a list for several).  None: complex operands are an error.
      A rule with ``takes_packed = True`` gets complex operands packed instead (one real
      array with a trailing axis of 2, NumPy's layout: complex BLAS), and may return one.
    * ``vjp`` (an attribute the defining module sets): the reverse-mode rule
      ``vjp(ct, *operands, out=result, **params)`` -> one cotangent per operand (None for
      none), see ``lax.ad_util``; a primitive without one has no derivative yet.
    * ``batch`` (an attribute the defining module sets): the batching rule
      ``batch(args, batched, **params)`` -> result(s) for a whole batch (see
      ``lax.batching``); under ``vmap`` a primitive without one runs once per example.
    """

    def __init__(self, name: str, *, shape_rule: Callable, dtype_rule: Callable, impl: Callable,
                 kind: str = "opaque", multiple_results: bool = False, weak_rule: Callable | None = None,
                 complex_rule: Callable | None = None):
        self.name = name
        self.shape_rule = shape_rule
        self.dtype_rule = dtype_rule
        self.impl = impl
        self.kind = kind
        self.multiple_results = multiple_results
        self.weak_rule = weak_rule or (lambda *types, **p: False)
        self.complex_rule = complex_rule
        PRIMITIVES[name] = self

    def __reduce__(self):
        # pickled by name (its rules are code): the persistent cache stores lowered modules
        return _primitive, (self.name,)

    def abstract_eval(self, env: ShapeEnv, types: Sequence[TensorType], params: dict) -> list[TensorType]:
        shapes = self.shape_rule(env, *types, **params)
        dtypes = self.dtype_rule(*types, **params)
        weak = self.weak_rule(*types, **params)
        if not self.multiple_results:
            shapes, dtypes = [shapes], [dtypes]
        elif not isinstance(dtypes, (list, tuple)):
            dtypes = [dtypes] * len(shapes)
        if not isinstance(weak, (list, tuple)):
            weak = [weak] * len(shapes)
        if self.complex_rule is None:
            bad = [t.dtype for t in types if t.dtype.kind == "c"] or \
                [np.dtype(d) for d in dtypes if np.dtype(d).kind == "c"]
            if bad:
                raise TypeError(f"{self.name} does not support complex arrays (got {bad[0]}); "
                                f"relaxjax has no complex version of it")
        return [TensorType(tuple(s), np.dtype(d), bool(w)) for s, d, w in zip(shapes, dtypes, weak)]

    def bind(self, *args, **params):
        return bind(self, args, params)

    def __repr__(self) -> str:
        return f"Primitive({self.name})"


PRIMITIVES: dict[str, Primitive] = {}


# ---------------------------------------------------------------------------------------
# Trace context
# ---------------------------------------------------------------------------------------

_state = threading.local()


def current_trace() -> "TraceContext | None":
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None


class TraceContext:
    """Records bindings while a Python function runs on tracers."""

    def __init__(self, env: ShapeEnv, parent: "TraceContext | None" = None):
        self.env = env
        self.bindings: list[Binding] = []
        self.alive = True
        self.respecializers: dict = {}
        # a region (a loop body, a branch) is traced in a child context sharing the env:
        # tracers of enclosing contexts used in it are captured as extra parameters
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.captured: dict = {}        # id(outer tracer) -> (outer tracer, inner Var)
        # bindings computed from scalar constants alone (iota, zeros): a region that uses
        # one recomputes it rather than capturing it, so that its loops see the values
        # (an ``arange`` compared with the loop index bounds a reduction) and fuse them
        self.generators: dict = {}      # Var -> its Binding
        self._recomputed: dict = {}     # id(outer tracer) -> (outer tracer, inner Var)
        self._consts: dict = {}         # id(outside array) -> (array, its snapshot Literal)
        self.stopped: set = set()       # Vars no derivative flows through (stop_gradient)
        self.custom_vjps: dict = {}     # Var -> (its custom_vjp call, output index)
        # values that are a ragged array's (or block's) packed values: Var -> (the offsets'
        # Var, "array" | "block"); the printer shows their ragged type (``ir.ragged_type``)
        self.ragged: dict = {}

    def __enter__(self):
        if not hasattr(_state, "stack"):
            _state.stack = []
        _state.stack.append(self)
        self._env_cm = use_env(self.env)
        self._env_cm.__enter__()
        return self

    def __exit__(self, *exc):
        self._env_cm.__exit__(*exc)
        _state.stack.pop()
        self.alive = False

    def new_param(self, type: TensorType, hint: str) -> "Tracer":
        return Tracer(self, Var(type, hint))

    def atom(self, x: Any):
        """Operand -> IR atom: a Var for our tracers, a Literal for constants and dims."""
        if isinstance(x, Tracer):
            if x.stale is not None:
                raise ValueError(x.stale[1])
            if x.ctx is not self and x.ctx.alive and self._encloses(x.ctx):
                return self._capture(x)
            if x.ctx is not self:
                raise TracerConversionError(
                    "a traced value escaped from the function that traced it (a leaked tracer); "
                    "return it from the jitted function instead of storing it")
            return x.atom
        if isinstance(x, SymbolicDim):
            return Literal(self.env.canon(x.expr), TensorType((), np.dtype("int64"), True))
        if isinstance(x, (np.ndarray, np.generic)):
            # an array from outside the trace (a closure's, a global) is a constant of the
            # trace, as in JAX: a snapshot taken once per trace, so that the user writing into
            # it later changes neither the compiled code's outputs nor only some of them
            # (constant folding would otherwise have read it at compile time, kernels at
            # run time)
            dt.reject_masked(x)
            hit = self._consts.get(id(x))
            if hit is None or hit[0] is not x:
                arr = np.array(x, copy=True)
                dt.canonical(arr.dtype)
                hit = self._consts[id(x)] = (x, Literal(arr, TensorType(arr.shape, arr.dtype)))
            return hit[1]
        if isinstance(x, (bool, int, float, complex)):
            d = dt.WEAK_DEFAULT[type(x)]
            return Literal(np.asarray(x, d), TensorType((), d, True))
        raise TypeError(f"cannot use a {type(x).__name__} as an array operand")

    def _encloses(self, other: "TraceContext") -> bool:
        p = self.parent
        while p is not None:
            if p is other:
                return True
            p = p.parent
        return False

    def _capture(self, x: "Tracer") -> Var:
        """A value of an enclosing trace used in this region: a parameter of the region,
        passed in by the binding that runs it (closure conversion)."""
        hit = self.captured.get(id(x)) or self._recomputed.get(id(x))
        if hit is None:
            gen = x.ctx.generators.get(x.atom)
            if gen is not None:          # recomputed here: see ``generators``
                outs = [Var(v.type, v.hint) for v in gen.outvars]
                b = Binding(outs, gen.callee, list(gen.args), dict(gen.params), gen.source)
                self.bindings.append(b)
                for v in outs:
                    self.generators[v] = b
                hit = self._recomputed[id(x)] = (x, outs[gen.outvars.index(x.atom)])
                return hit[1]
            hit = self.captured[id(x)] = (x, Var(x.type, "captured"))
        return hit[1]

    def finalize(self, name: str, params: list, param_names: list, results: list) -> Function:
        """The traced function, with the equalities found while tracing (automatic mode)
        applied to every type and dim in it."""
        env, bindings = self.env, self.bindings
        subst = env.subst
        if subst:
            for v in params:
                v.type = v.type.substitute(subst)
            cache: dict = {}

            def lit(a):
                if isinstance(a, Literal):
                    if id(a) not in cache:
                        cache[id(a)] = Literal(_subst_value(a.value, subst), a.type.substitute(subst))
                    return cache[id(a)]
                return a
            for b in bindings:
                for v in b.outvars:
                    v.type = v.type.substitute(subst)
                b.args = [lit(a) for a in b.args]
                b.params = {k: _subst_value(v, subst) for k, v in b.params.items()}
                for r in regions(b):       # equalities found after a region was traced
                    _subst_region(r.main, subst)
                if b in self.respecializers:    # e.g. a kernel's program, specialised to old dims
                    b.callee = self.respecializers[b](subst)
            results = [lit(r) for r in results]
        syms = set()
        for p in params:
            syms |= p.type.free_symbols()
        for b in bindings:
            for v in b.outvars:
                syms |= v.type.free_symbols()
        # sorted by name: the same function traces to the same module (and cache key) in any
        # process, whatever the hash seed
        bounds = {s: env.bounds.get(s, (1, INF)) for s in sorted(syms, key=lambda s: s.name)}
        return Function(name, list(params), list(param_names), list(bindings), results, bounds,
                        env.final_guards())

    def on_dims_equated(self, binding: Binding, respecialize: Callable[[dict], Any]) -> None:
        """``respecialize(subst)`` gives ``binding``'s callee anew when the trace equates dims
        after the binding was recorded (automatic mode): a callee that holds a program built
        for the dims it was called with (a user kernel, relaxjax.pykernel)."""
        self.respecializers[binding] = respecialize

    def emit(self, prim: Primitive, args: Sequence[Any], params: dict):
        atoms = [self.atom(a) for a in args]
        types = [a.type.substitute(self.env.subst) for a in atoms]
        try:
            out_types = prim.abstract_eval(self.env, types, params)
        except ShapeError as e:
            _add_location(e)
            raise
        outvars = [Var(t) for t in out_types]
        b = Binding(outvars, prim, atoms, params, user_source())
        self.bindings.append(b)
        if prim.kind != "control" and all(isinstance(a, Literal) and a.type.ndim == 0 for a in atoms):
            for v in outvars:
                self.generators[v] = b
        outs = [Tracer(self, v) for v in outvars]
        return outs if prim.multiple_results else outs[0]


def _subst_region(fn: Function, subst: dict) -> None:
    for v in fn.params:
        v.type = v.type.substitute(subst)
    for b in fn.bindings:
        for v in b.outvars:
            v.type = v.type.substitute(subst)
        b.args = [Literal(_subst_value(a.value, subst), a.type.substitute(subst))
                  if isinstance(a, Literal) else a for a in b.args]
        b.params = {k: _subst_value(v, subst) for k, v in b.params.items()}
        for r in regions(b):
            _subst_region(r.main, subst)
    fn.results = [Literal(_subst_value(a.value, subst), a.type.substitute(subst))
                  if isinstance(a, Literal) else a for a in fn.results]
    fn.bounds = {s: b for s, b in fn.bounds.items() if s not in subst}


def _subst_value(v, subst):
    if isinstance(v, (tuple, list)):
        return type(v)(_subst_value(x, subst) for x in v)
    if is_symbolic(v):
        return normalize(v.xreplace(subst))
    return v


def _add_location(e: Exception) -> None:
    src = user_source()
    if src and hasattr(e, "add_note") and not getattr(e, "_rj_located", False):
        e.add_note(f"  (traced at {src})")
        e._rj_located = True  # type: ignore[attr-defined]


def user_source() -> str | None:
    """file:line of the innermost frame outside relaxjax (the user's line being traced)."""
    f = sys._getframe(1)
    while f is not None:
        fname = f.f_code.co_filename
        if not fname.startswith(_PACKAGE_DIR):
            return f"{os.path.basename(fname)}:{f.f_lineno}"
        f = f.f_back
    return None


def find_trace(args: Sequence[Any]) -> TraceContext | None:
    """The innermost trace among the arguments' tracers (a loop body's, when a body mixes its
    own values with captured outer ones)."""
    found = None
    for a in args:
        if isinstance(a, Tracer):
            if not a.ctx.alive:
                raise TracerConversionError(
                    "a traced value from a finished trace was used (a leaked tracer); "
                    "return it from the jitted function instead of storing it")
            if found is None or a.ctx.depth > found.depth:
                found = a.ctx
    if found is not None:
        cur = current_trace()       # a captured outer value alone, inside a region
        if cur is not None and cur is not found and cur.alive and cur._encloses(found):
            return cur
        return found
    for a in args:
        if isinstance(a, SymbolicDim):
            return current_trace()
    return None


def _has_symbolic(v) -> bool:
    if isinstance(v, (tuple, list)):
        return any(_has_symbolic(x) for x in v)
    return isinstance(v, sympy.Basic)


def bind(prim: Primitive, args: Sequence[Any], params: dict):
    trace = find_trace(args)
    if trace is None and _has_symbolic(list(params.values())):
        trace = current_trace()   # creation ops with symbolic sizes (zeros((n, 4)))
    if trace is not None:
        return trace.emit(prim, args, params)
    return eval_eager(prim, args, params)


def eval_eager(prim: Primitive, args: Sequence[Any], params: dict):
    """Run the reference implementation, checking it against the shape and dtype rules."""
    arrays = [np.asarray(a) for a in args]
    for a in arrays:
        dt.canonical(a.dtype)
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    out_types = prim.abstract_eval(ShapeEnv("explicit"), types, params)
    outs = prim.impl(*arrays, **params)
    outs = list(outs) if prim.multiple_results else [outs]
    outs = [np.asarray(o) for o in outs]
    for o, t in zip(outs, out_types):
        if o.shape != t.shape or o.dtype != t.dtype:
            raise AssertionError(f"internal error: {prim.name} produced {o.dtype}{list(o.shape)}, "
                                 f"its rules say {t}")
    return outs if prim.multiple_results else outs[0]


# ---------------------------------------------------------------------------------------
# Tracer
# ---------------------------------------------------------------------------------------

class Tracer:
    """A traced array: its operators and methods build IR through relaxjax.numpy.

    ``atom`` is the IR value the tracer stands for now: ``x[i] = v`` rebinds it (the update
    is functional, the name sees the new value).  ``view_of`` holds weak references to the
    tracers this one is a view of (basic indexing, reshape, transpose), so that writing
    into a view whose base is still alive can be refused.  ``stale`` is set on such a base
    when ``view op= value`` wrote into the view (NumPy would have changed the base too): the
    pending value, and the message a later use of the base raises -- unless that value is
    stored back into it at once, as Python does for ``x[i] += v``."""
    __slots__ = ("ctx", "atom", "view_of", "stale", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, ctx: TraceContext, atom):
        self.ctx = ctx
        self.atom = atom
        self.view_of = ()
        self.stale = None

    @property
    def type(self) -> TensorType:
        return self.atom.type.substitute(self.ctx.env.subst)

    @property
    def shape(self) -> tuple:
        return tuple(wrap_dim(d) for d in self.type.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.atom.type.dtype

    @property
    def weak_type(self) -> bool:
        return self.atom.type.weak

    @property
    def ndim(self) -> int:
        return len(self.atom.type.shape)

    @property
    def size(self):
        return wrap_dim(prod(self.type.shape))

    def __len__(self):
        if not self.ndim:
            raise TypeError("len() of a 0-d array")
        d = self.type.shape[0]
        return d if isinstance(d, int) else self.ctx.env.concrete(d, "len() of a traced array")

    def __repr__(self) -> str:
        return f"Tracer<{self.type}>"

    # Python control flow on traced values cannot work: say so precisely.
    def __bool__(self):
        raise TracerConversionError(
            f"the truth value of a traced array ({self.type}) is only known at run time; "
            f"use relaxjax.numpy.where, relaxjax.lax.cond / while_loop / fori_loop (or a "
            f"static argument) instead of Python if/while")

    def _no_concrete(self, what):
        raise TracerConversionError(
            f"{what} of a traced array ({self.type}) is only known at run time; "
            f"keep it as an array, or make the argument static (static_argnums)")

    def __int__(self): self._no_concrete("int()")
    def __float__(self): self._no_concrete("float()")
    def __index__(self): self._no_concrete("an index")
    def __array__(self, dtype=None, copy=None): self._no_concrete("numpy conversion")

    def __iter__(self):
        n = len(self)
        return (self[i] for i in range(n))

    def __hash__(self):
        return id(self)

    # Operators, array methods and NumPy's ufunc dispatch (np.exp(x) inside @jit) are
    # installed by relaxjax.numpy, the layer that defines them (numpy/_tracer_methods.py).
