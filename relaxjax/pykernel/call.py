"""``rj.kernel`` objects and ``rj.call_tir``: binding a kernel's dim names to a caller's
shapes, specialising its program per binding, and the call itself (traced or eager)."""
from __future__ import annotations

import ast
import functools
import inspect
import weakref

import numpy as np
import sympy

from .. import dtypes as dt
from ..core import Tracer, current_trace, find_trace, user_source
from ..errors import InconclusiveDimensionError, ShapeError
from ..ir import Binding, TensorType, Var
from ..lax.tir_interp import compile_primfunc
from ..shapes import INF, ShapeEnv, dim_str, floordiv, free_symbols, is_symbolic, normalize, symbol
from ..structs import ShapeDtypeStruct
from . import lang, scope
from .lang import dim_text, resolve_dim
from .parser import build_primfunc
from .verify import check_bounds, raise_shape_error


class Kernel:
    """A loop-level program written in Python (``@rj.kernel``).  Its parameters are buffers
    (``rj.Buffer[(dims...), dtype]``); the ones it stores into are its outputs and must come
    after all its inputs.  ``str(kernel)`` is its loop-level program; ``rj.call_tir`` calls it."""

    def __init__(self, fn, n_outputs: int | None = None):
        functools.update_wrapper(self, fn)
        self.src = src = scope.Source(fn)
        self.name = src.name
        src.check_syntax()
        fdef = src.fdef
        a = fdef.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
            src.error(fdef, "kernel parameters are plain buffer parameters (no defaults, *args, **kw)")
        try:
            ann = inspect.get_annotations(fn, eval_str=True)
        except Exception as e:      # noqa: BLE001 - an annotation that does not evaluate
            src.error(fdef, f"cannot evaluate the parameter annotations: {e}")
        self.params = []
        for p in a.args:
            spec = ann.get(p.arg)
            if not isinstance(spec, lang.BufferSpec):
                src.error(p, f"parameter {p.arg} needs a buffer annotation, "
                             f"e.g. {p.arg}: rj.Buffer[('n',), 'float32']", TypeError)
            self.params.append((p.arg, spec))
        names = [p for p, _ in self.params]
        self.dims = list(dict.fromkeys(d for _, s in self.params for d in s.dim_names()))
        for d in self.dims:
            if d in names:
                src.error(fdef, f"{d} names both a parameter and a dim")
        stored = scope.stored_params(fdef, names)
        if not stored:
            src.error(fdef, "the kernel stores into none of its parameters: it has no output")
        if n_outputs is not None:
            if not 1 <= n_outputs <= len(names):
                src.error(fdef, f"n_outputs={n_outputs} for {len(names)} parameters", TypeError)
            first_out = len(names) - n_outputs
        else:
            first_out = min(names.index(p) for p in stored)
        for p in names[:first_out]:
            if p in stored:
                src.error(stored[p], f"store to input buffer {p}: the buffers a kernel stores "
                                     f"into are its outputs, its last {len(names) - first_out} "
                                     f"parameter(s) ({', '.join(names[first_out:])})", TypeError)
        for p in names[first_out:] if n_outputs is None else ():
            if p not in stored:
                node = stored[names[first_out]]
                src.error(node, f"store to input buffer {names[first_out]}: the buffers a kernel "
                                f"stores into are its outputs and must be its last parameters, "
                                f"after every input ({p} is read only)", TypeError)
        self.outputs = names[first_out:]
        self.inputs = names[:first_out]
        self._analyse_locals(fn, fdef, names)
        self._specs: dict = {}
        self._checked: set = set()
        self.primfunc = self.specialize({d: symbol(d) for d in self.dims}, {})

    def _analyse_locals(self, fn, fdef, names) -> None:
        src = self.src
        self.globals = dict(fn.__globals__)
        cv = inspect.getclosurevars(fn)
        self.globals.update(cv.nonlocals)
        counts = scope.assigned_names(fdef)
        loops = scope.loop_targets(fdef)
        for n in counts:
            if n in loops:
                src.error(fdef, f"{n} is a loop variable and is also assigned")
        self.locals = set(counts)
        sc = scope.Scopes(fdef, self.locals)
        self.zero_before, self.init_at = {}, {}
        for n, (sid, how) in sc.decl.items():
            if how == "init":
                self.init_at[sid] = n
            else:
                self.zero_before.setdefault(sid, []).append(n)
        top = {id(s) for s in fdef.body if isinstance(s, ast.Assign)}
        self.aliases = {n for n, c in counts.items() if c == 1 and sc.decl.get(n, (None,))[0] in top
                        and self.init_at.get(sc.decl[n][0]) == n}
        self.fixed = {}
        for node in ast.walk(fdef):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                try:
                    t = eval(compile(ast.Expression(node.annotation), "<annotation>", "eval"),  # noqa: S307
                             self.globals)
                    d = dt.canonical(t)
                except Exception:   # noqa: BLE001
                    src.error(node, "a local's annotation must be a dtype (rj.float32, 'int64', ...)",
                              TypeError)
                if self.fixed.setdefault(node.target.id, d) != d:
                    src.error(node, f"local {node.target.id} is annotated with two dtypes", TypeError)
                self.aliases.discard(node.target.id)

    # -- programs ------------------------------------------------------------------------
    def specialize(self, binding: dict, bounds: dict, name: str | None = None):
        """The program for ``binding`` (dim name -> dim of the caller), verified against
        out-of-bounds accesses under ``bounds`` (symbol -> (lo, hi))."""
        name = name or self.name
        syms = set()
        for d in binding.values():
            syms |= free_symbols(d)
        key = (tuple(sorted((k, str(v)) for k, v in binding.items())), name,
               tuple(sorted((s.name, bounds.get(s, (1, INF))) for s in syms)))
        f = self._specs.get(key)
        if f is None:
            f, node_of = build_primfunc(self, dict(binding), name)
            _SPECIALISED[f] = (self, dict(binding), node_of)
            self.check(f, {s: bounds.get(s, (1, INF)) for s in syms})
            self._specs[key] = f
        return f

    def check(self, f, bounds: dict) -> None:
        """Raise ShapeError on an access of ``f`` (one of this kernel's programs) that is
        out of bounds for every dim value within ``bounds``."""
        node_of = _SPECIALISED[f][2]
        check_bounds(f, ShapeEnv("explicit", bounds), raise_shape_error(self.src, node_of))

    def __str__(self) -> str:
        return str(self.primfunc)

    def __repr__(self) -> str:
        return f"<rj.kernel {self.name}>"

    def __call__(self, *args, **kwargs):
        raise TypeError(f"kernel {self.name} is called through rj.call_tir({self.name}, *inputs, "
                        f"out=rj.ShapeDtypeStruct(shape, dtype))")


def kernel(fn=None, *, n_outputs: int | None = None):
    """Decorator: a loop-level program written in Python.  See :class:`Kernel`.  The
    outputs are the parameters the kernel stores into, which must come after every input;
    ``@rj.kernel(n_outputs=k)`` says instead that the last ``k`` parameters are the outputs
    (a store into an earlier one is then an error)."""
    if fn is None:
        return lambda f: Kernel(f, n_outputs)
    return Kernel(fn, n_outputs)


_SPECIALISED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def respecialize(f, subst: dict):
    """``f`` with the trace's final dim substitutions applied (automatic mode may equate
    dims after a kernel call was recorded); ``f`` itself when unaffected or not a kernel's."""
    spec = _SPECIALISED.get(f)
    if spec is None or not subst:
        return f
    k, binding, _ = spec
    new = {n: normalize(d.xreplace(subst)) if is_symbolic(d) else d for n, d in binding.items()}
    if new == binding:
        return f
    return k.specialize(new, {}, f.name)


# ---------------------------------------------------------------------------------------
# Binding a kernel's dims to actual shapes
# ---------------------------------------------------------------------------------------

def bind_dims(k: Kernel, types: list, env: ShapeEnv) -> dict:
    """Kernel dim name -> the caller's dim, checking ranks, dtypes and every repeated dim
    (``TypeError`` for a dtype, ``ShapeError`` otherwise).  Axes declared by a bare name bind
    it; an axis declared by an expression (``"2*n"``) is checked against the names bound
    elsewhere, or binds the one name it leaves unknown when it is linear in it."""
    binding: dict = {}
    where: dict = {}
    axes = []
    for (pname, spec), (shape, dtype) in zip(k.params, types):
        role = "output" if pname in k.outputs else "argument"
        if np.dtype(dtype) != spec.dtype:
            raise TypeError(f"kernel {k.name}: {role} {pname}: expected dtype {spec.dtype}, got {dtype}")
        if len(shape) != len(spec.shape):
            raise ShapeError(f"kernel {k.name}: {role} {pname}: expected rank {len(spec.shape)} "
                             f"{spec}, got rank {len(shape)} [{', '.join(dim_str(d) for d in shape)}]")
        axes += [(role, pname, ax, want, env.canon(got))
                 for ax, (want, got) in enumerate(zip(spec.shape, shape))]
    for role, pname, ax, want, got in axes:               # bare names bind first
        if isinstance(want, str) and want not in binding:
            binding[want], where[want] = got, f"{pname} axis {ax}"
    for role, pname, ax, want, got in axes:
        if is_symbolic(want):
            _solve_for_unbound(k, want, got, binding, where, env, f"{pname} axis {ax}")
        expect = resolve_dim(want, binding)
        how = (f" (dim {want}, bound by {where[want]})" if isinstance(want, str) else
               f" ({dim_text(want)})" if is_symbolic(want) else "")
        what = f"kernel {k.name}: {role} {pname} axis {ax}: expected {dim_str(expect)}{how}"
        r = env.try_prove("==", env.canon(expect), got)
        if r is False:
            raise ShapeError(f"{what}, got {dim_str(got)}")
        if r is None:
            if env.mode != "auto":
                raise InconclusiveDimensionError(
                    f"{what}, got {dim_str(got)}: cannot prove them equal. Fix: declare them "
                    f"with one dim name, or pass arrays whose shapes match")
            env.require_eq(expect, got, what)       # automatic mode: a guard
    return {n: env.canon(d) for n, d in binding.items()}


def _solve_for_unbound(k: Kernel, expr, got, binding: dict, where: dict, env: ShapeEnv,
                       axis: str) -> None:
    """Bind the one name ``expr`` leaves unknown from ``expr == got``: ``2*n == d`` gives
    ``n = d // 2`` once 2 divides d (proved, or guarded in automatic mode)."""
    unknown = sorted(s for s in expr.free_symbols if s.name not in binding)
    if not unknown:
        return
    p = resolve_dim(expr, binding)
    u = unknown[0]
    if len(unknown) > 1 or p.has(sympy.floor) or not p.is_polynomial(u) or sympy.degree(p, u) != 1:
        raise ShapeError(f"kernel {k.name}: {axis} is declared {dim_text(expr)}, which cannot "
                         f"bind {', '.join(s.name for s in unknown)}: name each dim alone in some "
                         f"parameter's shape, or use an expression linear in one unknown dim")
    coeff, rest = p.coeff(u, 1), p.coeff(u, 0)
    num = normalize(sympy.expand(sympy.sympify(got) - rest))
    if not (coeff.is_Integer and int(coeff) > 0):
        raise ShapeError(f"kernel {k.name}: {axis} is declared {dim_text(expr)}: the coefficient "
                         f"of {u.name} must be a positive integer to bind it")
    c = int(coeff)
    if c != 1 and not env.divides(num, c, f"kernel {k.name}: {axis} = {dim_text(expr)}"):
        raise ShapeError(f"kernel {k.name}: {axis} is declared {dim_text(expr)}, got "
                         f"{dim_str(got)}: {dim_str(num)} is not a multiple of {c}")
    binding[u.name], where[u.name] = floordiv(num, c) if c != 1 else num, axis


def _out_structs(out):
    many = isinstance(out, (list, tuple))
    structs = list(out) if many else [out]
    for s in structs:
        if not isinstance(s, ShapeDtypeStruct):
            raise TypeError(f"call_tir: out= takes rj.ShapeDtypeStruct(shape, dtype) or a list of "
                            f"them, got {type(s).__name__}")
    return structs, many


def call_tir(kern: Kernel, *args, out):
    """Call kernel ``kern`` on ``args`` (its inputs), returning new arrays shaped like ``out``
    (a ``ShapeDtypeStruct`` or a list of them; a tuple comes back for a list).  Inside
    ``rj.jit`` it records a ``call_tir`` binding whose program has the kernel's dim names
    bound to the caller's (symbolic) dims; on NumPy arrays it runs the kernel through the
    reference loop interpreter."""
    if not isinstance(kern, Kernel):
        raise TypeError(f"call_tir takes an rj.kernel, got {type(kern).__name__}")
    structs, many = _out_structs(out)
    if len(args) != len(kern.inputs) or len(structs) != len(kern.outputs):
        raise TypeError(f"kernel {kern.name} takes {len(kern.inputs)} inputs "
                        f"({', '.join(kern.inputs)}) and {len(kern.outputs)} outputs "
                        f"({', '.join(kern.outputs)}); call_tir got {len(args)} inputs and "
                        f"{len(structs)} out structs")
    for p, a in zip(kern.inputs, args):
        if not isinstance(a, (Tracer, np.ndarray, np.generic)):
            raise TypeError(f"kernel {kern.name}: argument {p} must be an array, got {type(a).__name__}")
    ctx = find_trace(args)
    if ctx is None and any(is_symbolic(d) for s in structs for d in s.dims()):
        ctx = current_trace()
    if ctx is None:
        outs = _eager(kern, [np.asarray(a) for a in args], structs)
    else:
        outs = _traced(ctx, kern, args, structs)
    return tuple(outs) if many else outs[0]


def _traced(ctx, kern: Kernel, args, structs) -> list:
    env = ctx.env
    atoms = [ctx.atom(a) for a in args]
    in_types = [a.type.substitute(env.subst) for a in atoms]
    out_types = []
    known = set(env.bounds)
    for s in structs:
        dims = tuple(env.canon(d) for d in s.dims())
        for d in dims:
            unbound = free_symbols(d) - known
            if unbound:
                raise ShapeError(f"kernel {kern.name}: out shape ({', '.join(dim_str(x) for x in dims)}) "
                                 f"uses {', '.join(sorted(x.name for x in unbound))}, which no "
                                 f"argument binds; write it with the inputs' dims (x.shape[0])")
        out_types.append(TensorType(dims, s.dtype))
    binding = bind_dims(kern, [(t.shape, t.dtype) for t in in_types + out_types], env)
    f = kern.specialize(binding, env.bounds, _call_name(ctx, kern, binding))
    out_types = [TensorType(tuple(env.canon(d) for d in t.shape), t.dtype) for t in out_types]
    outvars = [Var(t) for t in out_types]
    binding = Binding(outvars, f, atoms, {}, user_source())
    ctx.bindings.append(binding)
    ctx.on_dims_equated(binding, lambda subst: respecialize(f, subst))
    return [Tracer(ctx, v) for v in outvars]


_NAMES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _call_name(ctx, kern: Kernel, binding: dict) -> str:
    """The kernel's name, suffixed when one trace calls it with two different bindings."""
    names = _NAMES.setdefault(ctx, {})
    key = (id(kern), tuple(sorted((k, str(v)) for k, v in binding.items())))
    if key not in names:
        used = set(names.values())
        name, i = kern.name, 1
        while name in used:
            name, i = f"{kern.name}_{i}", i + 1
        names[key] = name
    return names[key]


def _eager(kern: Kernel, arrays: list, structs) -> list:
    for a in arrays:
        dt.canonical(a.dtype)
    shapes = []
    for s in structs:
        dims = s.dims()
        if any(not isinstance(d, int) for d in dims):
            raise ShapeError(f"kernel {kern.name}: out shape {s.shape} must be concrete outside rj.jit")
        shapes.append(tuple(dims))
    env = ShapeEnv("explicit")
    binding = bind_dims(kern, [(a.shape, a.dtype) for a in arrays] +
                        [(sh, s.dtype) for sh, s in zip(shapes, structs)], env)
    # the generic program, with its dims pinned to this call's sizes for the bounds check
    D = {d: int(v) for d, v in binding.items()}
    key = tuple(sorted(D.items()))
    if key not in kern._checked:
        kern.check(kern.primfunc, {symbol(d): (v, v) for d, v in D.items()})
        kern._checked.add(key)
    prog = compile_primfunc(kern.primfunc)
    outs = [np.zeros(sh, s.dtype) for sh, s in zip(shapes, structs)]     # (PrimFunc.zero_outputs)
    prog(arrays + outs, D)
    return outs
