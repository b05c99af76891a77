"""Well-formedness of graph IR: every use defined once before it is used, every dim bound, and
struct info consistent with the primitives' shape and dtype rules."""
from __future__ import annotations

import sympy

from ..errors import InconclusiveDimensionError, ShapeError
from ..ir import Function, IRModule, Literal, Var
from ..shapes import ShapeEnv, dim_str
from ..tir import PrimFunc, TIRError, verify_primfunc


class VerificationError(AssertionError):
    """The IR is malformed (a compiler bug, not a user error)."""


class _AssumingEnv(ShapeEnv):
    """Relations that tracing decided by guards or run-time checks are taken as given;
    only relations that are provably false are errors."""

    def decide(self, op, a, b, what="comparison"):
        r = self.try_prove(op, a, b)
        return True if r is None else r

    def require_eq(self, a, b, what):
        if self.try_prove("==", a, b) is False:
            raise ShapeError(f"{what}: {dim_str(a)} != {dim_str(b)}")
        return a

    def concrete(self, d, what):
        raise InconclusiveDimensionError(what)


def verify(module: IRModule, rules: bool = True) -> None:
    """Check ``module``'s functions (values defined before use, dims bound, calls matching
    their callees); ``rules``: also run every primitive's shape and dtype rule again on its
    recorded operands and compare the recorded result types."""
    for fn in module.functions.values():
        if isinstance(fn, Function):
            verify_function(fn, rules)
        elif isinstance(fn, PrimFunc):
            try:
                verify_primfunc(fn)
            except TIRError as e:
                raise VerificationError(str(e)) from None


def _may_agree(env: ShapeEnv, a, b) -> bool:
    """Two typed things (tensor types, buffers) have the same dtype and rank, and no dim
    that is provably different."""
    return a.dtype == b.dtype and len(a.shape) == len(b.shape) and all(
        env.try_prove("==", x, y) is not False for x, y in zip(a.shape, b.shape))


def _check_function_call(b, env, err, where) -> None:
    """A call of a graph sub-function: operands and results match its signature."""
    f = b.callee
    if len(b.args) != len(f.params) or len(b.outvars) != len(f.results):
        err(f"{where}: {len(b.args)} operands and {len(b.outvars)} results for @{f.name} with "
            f"{len(f.params)} parameters and {len(f.results)} results")
    for a, p in zip(list(b.args) + list(b.outvars), list(f.params) + list(f.results)):
        t, want = a.type, p.type
        if t.dtype != want.dtype or len(t.shape) != len(want.shape):
            err(f"{where}: operand of type {t} passed for {want} of @{f.name}")


def _check_tir_call(b, env, err, where) -> None:
    """call_tir: the graph operands and results have the program's buffer types."""
    f = b.callee
    if len(b.args) != len(f.inputs) or len(b.outvars) != len(f.outputs):
        err(f"{where}: {len(b.args)} operands and {len(b.outvars)} results for a program with "
            f"{len(f.inputs)} inputs and {len(f.outputs)} outputs")
    for a, buf in zip(list(b.args) + list(b.outvars), f.params):
        if not _may_agree(env, a.type, buf):
            err(f"{where}: operand of type {a.type} passed for buffer {buf.name}: {buf.type_str()}")


def verify_function(fn: Function, rules: bool = True) -> None:
    def err(msg):
        raise VerificationError(f"in {fn.name}: {msg}\n{fn}")

    defined: set = set()
    bound = set(fn.dim_vars)
    # a fused group (primitive) also reads its caller's dims (``t // n`` over scalars):
    # whether those are bound is checked where the caller is verified
    callers_dims = bool(fn.attrs.get("primitive"))
    env = _AssumingEnv("explicit", fn.bounds)
    for p in fn.params:
        if p in defined:
            err("a parameter appears twice")
        defined.add(p)

    def check_atom(a, where):
        if isinstance(a, Var):
            if a not in defined:
                err(f"{where} uses a value before it is defined")
        elif isinstance(a, Literal):
            if isinstance(a.value, sympy.Basic):
                unbound = a.value.free_symbols - bound
                if unbound and not callers_dims:
                    err(f"{where} uses dims {sorted(s.name for s in unbound)} that nothing binds")
        else:
            err(f"{where}: {a!r} is not an atom")

    for i, b in enumerate(fn.bindings):
        where = f"binding {i} ({b.callee.name})"
        for a in b.args:
            check_atom(a, where)
        if b.kind == "tir":
            _check_tir_call(b, env, err, where)
        if b.kind == "function":
            _check_function_call(b, env, err, where)
        if b.kind == "primitive" and rules:
            try:
                types = b.callee.abstract_eval(env, [a.type for a in b.args], b.params)
            except (ShapeError, TypeError, ValueError) as e:
                err(f"{where}: shape/dtype rule fails on the recorded operands: {e}")
            if len(types) != len(b.outvars):
                err(f"{where}: {len(b.outvars)} results recorded, the rule gives {len(types)}")
            for t, v in zip(types, b.outvars):
                if not _may_agree(env, t, v.type):
                    err(f"{where}: recorded type {v.type} disagrees with the rule's {t}")
        for v in b.outvars:
            if v in defined:
                err(f"{where} redefines a value")
            defined.add(v)
            new = v.type.free_symbols() - bound
            if new and getattr(b.callee, "kind", "") != "data_dependent" and not callers_dims:
                err(f"{where}: result type {v.type} uses dims {sorted(s.name for s in new)} "
                    f"that nothing binds")
            bound |= new
    for r in fn.results:
        check_atom(r, "return")
