"""SplitComplex: every complex value becomes a pair of real arrays (its real and imaginary
parts), so that no later pass and no backend sees a complex dtype.

Each binding with a complex operand or result is replaced by what its primitive's
``complex_rule`` binds (run in a trace over the function's dims: the rule sees each complex
operand as :class:`~relaxjax.lax.complex_parts.Parts`).  A complex value crossing a
function's boundary is *packed* (a real array with a trailing axis of 2: NumPy's layout of
a complex array): a complex parameter comes in packed and is split where it is used, a
complex result is packed where it is made, and so are a loop's carries and a branch's
results (every region is a function of its own, split the same way before the binding that
runs it).  The function records which parameters and results were complex in its attrs
(``complex_params``, ``complex_results``: positions), which the driver reads to view
complex arguments as packed float arrays and packed results as complex arrays.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..core import TraceContext, Tracer
from ..ir import Binding, Function, IRModule, Literal, TensorType, Var
from ..lax.complex_parts import Parts, pack, unpack
from ..shapes import ShapeEnv
from .passes import Pass


def _is_complex(t: TensorType) -> bool:
    return t.dtype.kind == "c"


def packed_type(t: TensorType) -> TensorType:
    """The type of a complex value packed: its shape plus a trailing 2, the parts' dtype."""
    return TensorType(tuple(t.shape) + (2,), dt.real_dtype(t.dtype), t.weak)


def _binding_is_complex(b: Binding) -> bool:
    return any(_is_complex(a.type) for a in b.args) or any(_is_complex(v.type) for v in b.outvars)


def function_has_complex(fn: Function) -> bool:
    return (any(_is_complex(p.type) for p in fn.params) or any(_is_complex(r.type) for r in fn.results)
            or any(_binding_is_complex(b) for b in fn.bindings))


def has_complex(module: IRModule) -> bool:
    """Whether any graph function of ``module`` (regions included) has a complex value."""
    from ..ir import regions
    for fn in module.functions.values():
        if isinstance(fn, Function):
            if function_has_complex(fn) or any(has_complex(r) for b in fn.bindings for r in regions(b)):
                return True
    return False


class _Complex:
    """A complex value of the function being split: its parts and/or its packed form, each
    made from the other when first asked for."""
    __slots__ = ("parts", "packed")

    def __init__(self, parts: Parts | None = None, packed: Tracer | None = None):
        self.parts, self.packed = parts, packed

    def get_parts(self) -> Parts:
        if self.parts is None:
            self.parts = unpack(self.packed)
        return self.parts

    def get_packed(self) -> Tracer:
        if self.packed is None:
            self.packed = pack(self.parts)
        return self.packed


def _literal_parts(ctx: TraceContext, a: Literal) -> Parts:
    v = np.asarray(a.value)
    rd = dt.real_dtype(v.dtype)
    t = TensorType(a.type.shape, rd, a.type.weak)
    return Parts(Tracer(ctx, Literal(np.array(v.real, rd), t)),
                 Tracer(ctx, Literal(np.array(v.imag, rd), t)))


def _describe(b: Binding) -> str:
    types = ", ".join(str(a.type) for a in b.args)
    return f"{b.callee.name}({types})" + (f" at {b.source}" if b.source else "")


def split_function(fn: Function) -> Function:
    """``fn`` with every complex value split into real parts (``fn`` itself if it has none)."""
    if not function_has_complex(fn):
        return fn
    env = ShapeEnv("explicit", fn.bounds)
    env.assume(fn.guards)
    ctx = TraceContext(env)
    vals: dict = {}
    params, complex_params = [], []
    for i, p in enumerate(fn.params):
        if _is_complex(p.type):
            q = Var(packed_type(p.type), p.hint)
            vals[p] = _Complex(packed=Tracer(ctx, q))
            params.append(q)
            complex_params.append(i)
        else:
            vals[p] = Tracer(ctx, p)
            params.append(p)

    def operand(a, packed: bool):
        if isinstance(a, Literal):
            if not _is_complex(a.type):
                return Tracer(ctx, a)
            return Tracer(ctx, _packed_literal(a)) if packed else _literal_parts(ctx, a)
        v = vals[a]
        if not isinstance(v, _Complex):
            return v
        return v.get_packed() if packed else v.get_parts()

    with ctx:
        for b in fn.bindings:
            if not _binding_is_complex(b):
                args = [a if isinstance(a, Literal) else ctx.atom(vals[a]) for a in b.args]
                ctx.bindings.append(Binding(b.outvars, b.callee, args, b.params, b.source))
                for v in b.outvars:
                    vals[v] = Tracer(ctx, v)
                continue
            rule = getattr(b.callee, "complex_rule", None) if b.kind == "primitive" else None
            if rule is None:
                what = {"tir": "the loop-level function", "library": "the library function",
                        "function": "the function"}.get(b.kind, "the primitive")
                raise TypeError(f"{what} {b.callee.name} takes or returns complex arrays "
                                f"({_describe(b)}); it has no complex version: pass the real "
                                f"and imaginary parts (np.real, np.imag) as float arrays")
            first = len(ctx.bindings)
            out = _packed_layout(ctx, b, rule, vals, operand)
            if out is None:
                packed = getattr(rule, "takes_packed", False)
                out = rule(*[operand(a, packed) for a in b.args], **b.params)
            for nb in ctx.bindings[first:]:
                nb.source = b.source
            outs = list(out) if b.callee.multiple_results else [out]
            for v, o in zip(b.outvars, outs):
                vals[v] = _value(v, o, b)
        results = [_result(ctx, vals, r) for r in fn.results]
    attrs = dict(fn.attrs)
    complex_results = tuple(i for i, r in enumerate(fn.results) if _is_complex(r.type))
    if complex_params:
        attrs["complex_params"] = tuple(complex_params)
    if complex_results:
        attrs["complex_results"] = complex_results
    return Function(fn.name, params, list(fn.param_names), ctx.bindings, results, fn.bounds,
                    fn.guards, attrs)


def _packed_layout(ctx: TraceContext, b: Binding, rule, vals: dict, operand):
    """An op on packed operands (``complex_parts.packable``), when its rule has a packed
    form and every complex operand is packed already; else None.  Its result's type is the
    traced one's packed (the trace checked the shapes: a reshape's element count proved
    under guards is not proved again from a product with the 2 in it)."""
    packed_params = getattr(rule, "packed_params", None)
    if packed_params is None or b.callee.multiple_results or not _is_complex(b.outvars[0].type):
        return None
    for a in b.args:
        if isinstance(a, Var) and _is_complex(a.type) and vals[a].packed is None:
            return None
    params = packed_params(**b.params)
    if params is None:
        return None
    out = Var(packed_type(b.outvars[0].type))
    ctx.bindings.append(Binding([out], b.callee, [ctx.atom(operand(a, True)) for a in b.args], params))
    return Tracer(ctx, out)


def _value(v: Var, o, b: Binding):
    """What a rule returned for the binding's result ``v``, checked against its type."""
    if _is_complex(v.type):
        if isinstance(o, Parts):
            return _Complex(parts=o)
        if isinstance(o, Tracer) and tuple(o.type.shape) == tuple(v.type.shape) + (2,):
            return _Complex(packed=o)
    elif isinstance(o, Tracer) and not _is_complex(o.type):
        return o
    raise AssertionError(f"internal error: the complex rule of {b.callee.name} returned "
                         f"{o!r} for a result of type {v.type}")


def _packed_literal(r: Literal) -> Literal:
    v = np.asarray(r.value)
    packed = np.stack([v.real, v.imag], axis=-1).astype(dt.real_dtype(v.dtype))
    return Literal(packed, packed_type(r.type))


def _result(ctx: TraceContext, vals: dict, r):
    if isinstance(r, Literal):
        return _packed_literal(r) if _is_complex(r.type) else r
    v = vals[r]
    return ctx.atom(v.get_packed() if isinstance(v, _Complex) else v)


def _split_module(module: IRModule) -> IRModule:
    fns = {name: split_function(fn) if isinstance(fn, Function) else fn
           for name, fn in module.functions.items()}
    if all(fns[k] is module.functions[k] for k in fns):
        return module
    return IRModule(fns, module.entry)


split_complex = Pass("SplitComplex", _split_module)
