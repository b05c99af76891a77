"""FuseTIR: one loop-level program for a fused group (a primitive sub-function made by
``FuseOps``).

Producers are inlined into consumers by composing the primitives' compute rules (see
``lowering``), so intermediates never touch memory.  Two shapes of program come out:

* an **injective** group is one loop nest over the outputs' shape;
* a **reduction** group (softmax, layer norm, logsumexp, ...) is one *row-wise* kernel: a
  parallel loop over the kept axes, and inside it one accumulator loop per reduction (its
  elementwise producers inlined, earlier reductions read from locals), then one loop that
  writes the full-shape outputs.  Each row is read from memory once and stays in cache for
  the later passes.  An expensive value (``exp`` in softmax) needed by several passes is
  stored into an output buffer by the first pass and re-read, not recomputed.

A matmul group lowers to the library call and one program for its elementwise epilogue.
"""
from __future__ import annotations

import copy
import weakref

from ..dimpoly import Unsupported
from ..ir import Binding, Function, Literal, Var
from ..shapes import ShapeEnv, is_symbolic, prod
from .. import tir
from ..tir.analysis import inline_primfunc, perfect_nest
from ..library import LibraryFunc
from .lowering import (BLAS, COMPUTE, REDUCERS, Accumulator, buffer_names, default_loop_kinds,
                       elementwise_rule, nonempty_checks, reindex, scalar_literal_expr)
from ..tir import Buffer, For, Load, Local, PrimFunc, Seq, Store, from_sympy
from ..tir.index_checks import data_index_checks
from ..tir.share import bind_shared
from .blas_calls import SYRK, gemm_call, gram_operand, mirror_program, read_lower_triangle
from .value_ranges import ValueRanges

# Ops worth storing once rather than recomputing in a second pass over a row.
EXPENSIVE = {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin",
             "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "atan2",
             "pow", "power"}


class FusionError(Exception):
    """The group cannot be expressed as one loop-level program (it is left unfused)."""


def _same_index(a: list, b: list) -> bool:
    """Two indices provably equal: as text, else as dim polynomials (an exact, one-sided test
    that SymPy's simplifier would take seconds over on a reshape's ``//`` and ``%``)."""
    if len(a) != len(b):
        return False
    memo: dict = {}
    for x, y in zip(a, b):
        if tir.expr_str(x) == tir.expr_str(y):
            continue
        try:
            if tir.index_poly(x, memo) != tir.index_poly(y, memo):
                return False
        except Unsupported:
            return False
    return True


def _is_reduction(b: Binding) -> bool:
    return b.kind == "primitive" and b.callee.kind == "reduction"


class _Builder:
    def __init__(self, name: str, bindings: list, inputs: list, outputs: list, bounds: dict):
        self.name = name
        self.bindings = bindings
        self.outputs = outputs
        self.env = ShapeEnv("explicit", bounds)
        self.ranges = ValueRanges(bindings, self.env)
        self.producer = {v: b for b in bindings for v in b.outvars}
        self.taken = set(tir.dim_vars([v.type.shape for v in inputs + outputs],
                                   [b.params for b in bindings],
                                   [a.value for b in bindings for a in b.args if isinstance(a, Literal)],
                                   [v.type.shape for b in bindings for v in b.outvars]))
        names = buffer_names(self.taken)
        needed = self.upstream(outputs) & set(inputs)
        self.buffer: dict = {}
        self.call_inputs: list = []
        for v in inputs:
            if v in needed:
                self._add_input(v, next(names))
        for b in bindings:           # array constants become input buffers
            for a in b.args:
                if isinstance(a, Literal) and scalar_literal_expr(a) is None and a not in self.buffer:
                    self._add_input(a, next(names))
        self.out_buffer = {}
        for k, v in enumerate(outputs):
            nm = f"out{k}" if len(outputs) > 1 else "out"
            while nm in self.taken:
                nm += "_"
            self.taken.add(nm)
            self.out_buffer[v] = Buffer(nm, tuple(v.type.shape), v.type.dtype)
        self.locals: dict = {}        # reduction result Var -> (tir local, outer index)
        self.to_cache: dict = {}      # value Var -> output buffer to store it in (row-wise groups)
        self.cached: dict = {}        # value Var -> buffer holding it at the full index
        self.full_key = None
        self.pending: list = []       # stores of values to cache, emitted in the current pass
        self.pass_value: dict = {}    # value Var -> local holding it in the current pass
        # (value Var, index text) -> its inlined expression in the current pass: a value read
        # several times shares one node, so a chain of n steps that each read the last value
        # three times (crc16's bit loop) builds n nodes, not 3 ** n; the code generators
        # emit a shared node once per statement
        self.inlined: dict = {}
        self.host_checks: list = []

    def _add_input(self, v, name):
        self.taken.add(name)
        self.buffer[v] = Buffer(name, tuple(v.type.shape), v.type.dtype)
        self.call_inputs.append(v)

    def upstream(self, roots, through=lambda b: True) -> set:
        """The values ``roots`` are computed from, following producers ``through`` admits."""
        seen, todo = set(), [v for v in roots if isinstance(v, Var)]
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            b = self.producer.get(v)
            if b is not None and through(b):
                todo.extend(a for a in b.args if isinstance(a, Var))
        return seen

    def equal(self, a, b) -> bool:
        return self.env.try_prove("==", a, b) is True

    # -- expressions -------------------------------------------------------------------
    def reader(self, a):
        e = scalar_literal_expr(a)
        if e is not None:
            return lambda idx, e=e: e
        return lambda idx, a=a: self.value(a, list(idx))

    def value(self, v, idx: list) -> tir.Expr:
        if v in self.buffer:
            return Load(self.buffer[v], tuple(idx))
        if v in self.locals:
            local, outer = self.locals[v]
            # an axis of extent 1 has one index, whatever expression reads it (a literal 0
            # where the value is broadcast, the loop variable of its one-trip loop)
            wide = [k for k, d in enumerate(v.type.shape) if d != 1]
            if not _same_index([idx[k] for k in wide], [outer[k] for k in wide]):
                raise FusionError(f"a reduction result is read at [{', '.join(map(str, idx))}]")
            return local
        key = self._key(idx)
        if v in self.pass_value and key == self.full_key:
            return self.pass_value[v]
        if v in self.cached and key == self.full_key:
            return Load(self.cached[v], tuple(idx))
        hit = self.inlined.get((v, key))
        if hit is not None:
            return hit
        b = self.producer.get(v)
        if b is None:
            raise FusionError(f"value {v} has no producer in the group")
        name = b.callee.name
        if b.kind == "tir":
            e = self.inlined[(v, key)] = self._inline_tir(b, idx)
            return e
        if b.kind != "primitive" or _is_reduction(b):
            raise FusionError(f"{name} cannot be inlined")
        if name in ("take", "take_along_axis"):
            ind, axis = b.args[1], b.params["axis"]
            if ind in self.buffer:
                self.host_checks.append(("index_range", self.call_inputs.index(ind),
                                         b.args[0].type.shape[axis], axis))
            elif not self.ranges.within(ind, b.args[0].type.shape[axis]):
                raise FusionError("gather indices computed inside the group cannot be range-checked")
        rule = COMPUTE.get(name, elementwise_rule if b.callee.kind == "elementwise" else None)
        if rule is None:
            raise FusionError(f"{name} has no compute rule")
        e = rule(name, idx, [self.reader(a) for a in b.args], [a.type for a in b.args],
                 b.outvars[0].type, **b.params)
        if v in self.to_cache and key == self.full_key and v not in self.cached:
            t = tir.fresh("t", self.taken, e.dtype)      # computed once, stored, used
            self.pending.append((v, [Local(t, e), Store(self.to_cache[v], tuple(idx), t)]))
            self.pass_value[v] = t
            return t
        self.inlined[(v, key)] = e
        return e

    def _inline_tir(self, b: Binding, idx: list) -> tir.Expr:
        """A call_tir whose program is a perfect loop nest, inlined at ``idx``."""
        f = b.callee
        if f.host_checks or data_index_checks(f) or perfect_nest(f) is None:
            raise FusionError(f"{f.name} is not a perfect loop nest")
        dims = {}
        for buf, a in zip(f.params, list(b.args) + list(b.outvars)):
            for d, actual in zip(buf.shape, a.type.shape):
                if is_symbolic(d) and d.is_Symbol:
                    dims.setdefault(d.name, from_sympy(actual))
        return inline_primfunc(f, idx, [self.reader(a) for a in b.args], dims)

    @staticmethod
    def _key(idx) -> tuple:
        return tuple(tir.expr_str(i) for i in idx)

    # -- programs ----------------------------------------------------------------------
    def primfunc(self, body, checks=()) -> PrimFunc:
        params = [self.buffer[v] for v in self.call_inputs] + [self.out_buffer[v] for v in self.outputs]
        consts = [a.value for b in self.bindings for a in b.args if isinstance(a, Literal)]
        body = bind_shared(body, self.taken)
        f = PrimFunc(self.name, params, len(self.outputs),
                     tir.dim_vars(params, [b.params for b in self.bindings], consts), body,
                     list(dict.fromkeys(self.host_checks)))
        try:
            tir.verify_primfunc(f)
        except tir.TIRError as e:
            raise FusionError(str(e)) from None
        return f

    def store_all(self, pairs) -> list:
        """Evaluate every output first, then store (an output may cache a value others read)."""
        stmts, temps = [], []
        for buf, idx, e in pairs:
            t = tir.fresh("v", self.taken, e.dtype)
            stmts.append(Local(t, e))
            temps.append((buf, idx, t))
        return stmts + [Store(buf, idx, t) for buf, idx, t in temps]

    def _store_at(self, v, idx: list, shape: tuple) -> tuple:
        """(buffer, index, value) storing output ``v`` from loops ``idx`` over ``shape`` (of
        as many elements): at ``idx`` where ``v`` has that shape; at the permuted index where
        ``v`` transposes a value of that shape (no division per element, and one value for
        both where the other is stored too); else at ``idx`` read as a row-major position
        in ``v``'s shape."""
        if self.env.same_shape(v.type.shape, shape):
            return self.out_buffer[v], tuple(idx), self.value(v, idx)
        b = self.producer.get(v)
        if b is not None and b.kind == "primitive" and b.callee.name == "transpose" and \
                isinstance(b.args[0], Var) and self.env.same_shape(b.args[0].type.shape, shape):
            return self.out_buffer[v], tuple(idx[p] for p in b.params["perm"]), self.value(b.args[0], idx)
        vi = reindex(idx, shape, v.type.shape)
        return self.out_buffer[v], tuple(vi), self.value(v, vi)

    def injective(self) -> PrimFunc:
        # the loops run over the largest output's shape, one that is not a transpose of
        # another shape where there is one
        anchor = max(self.outputs, key=lambda v: (v.type.ndim, self.producer.get(v) is None or
                                                  self.producer[v].callee.name != "transpose")).type.shape
        for v in self.outputs:
            if not self.equal(prod(v.type.shape), prod(anchor)):
                raise FusionError("outputs of an injective group differ in size")
        extents = [from_sympy(d) for d in anchor]

        def body(idx):
            return Seq(self.store_all([self._store_at(v, list(idx), tuple(anchor)) for v in self.outputs]))
        return self.primfunc(tir.loop_nest(extents, body, default_loop_kinds(len(anchor)), self.taken,
                                           drop_unit=True))

    def reduction(self) -> PrimFunc:
        reds = [b for b in self.bindings if _is_reduction(b)]
        if not reds:
            raise FusionError("a row-wise group without a reduction")
        full = tuple(reds[0].args[0].type.shape)
        axes = tuple(sorted(reds[0].params["axes"]))
        kept = tuple(d for a, d in enumerate(full) if a not in axes)
        for r in reds:
            self.host_checks += nonempty_checks(r.callee.name, full, axes)
            if r.callee.name not in REDUCERS or tuple(sorted(r.params["axes"])) != axes or \
                    not self.env.same_shape(r.args[0].type.shape, full):
                raise FusionError("the reductions of a group must share input shape and axes")
        if self.equal(prod(full), prod(kept)):
            raise FusionError("the reduced axes have size 1")

        def level(v):
            if self.equal(prod(v.type.shape), prod(full)):
                return "full"
            if self.equal(prod(v.type.shape), prod(kept)):
                return "kept"
            raise FusionError(f"value of shape {v.type} is neither row nor element sized")
        out_level = {v: level(v) for v in self.outputs}
        self.to_cache = self._plan_cache(reds, full, out_level)
        outer = [tir.fresh(f"i{k}", self.taken) for k in range(len(kept))]

        def full_index(inner):
            it_o, it_i = iter(outer), iter(inner)
            return [next(it_i) if a in axes else next(it_o) for a in range(len(full))]

        red_extents = [from_sympy(full[a]) for a in axes]
        stmts = []
        for r in reds:
            inner = [tir.fresh(f"r{k}", self.taken) for k in range(len(axes))]
            idx = full_index(inner)
            self.full_key = self._key(idx)
            self.pending, self.inlined = [], {}
            out_t = r.outvars[0].type.dtype
            accum = Accumulator(r.callee.name, out_t)
            x = self.value(r.args[0], idx)
            acc = tir.fresh("acc", self.taken, accum.dtype)
            body = Seq([st for _, sts in self.pending for st in sts] + [accum.update(acc, x)])
            for v, _ in self.pending:
                self.cached[v] = self.to_cache[v]
            self.pass_value = {}
            for var, ext in reversed(list(zip(inner, red_extents))):
                body = For(var, ext, "reduction", body)
            res = tir.fresh("red", self.taken, out_t)
            stmts += [Local(acc, accum.init), body, Local(res, accum.result(acc))]
            self.locals[r.outvars[0]] = (res, list(outer))
        row_outs = [v for v in self.outputs if out_level[v] == "kept"]
        self.inlined = {}
        pairs = []
        for v in row_outs:
            vi = reindex(list(outer), kept, v.type.shape)
            pairs.append((self.out_buffer[v], tuple(vi), self.value(v, vi)))
        stmts += self.store_all(pairs)
        elem_outs = [v for v in self.outputs if out_level[v] == "full"]
        if elem_outs:
            inner = [tir.fresh(f"j{k}", self.taken) for k in range(len(axes))]
            idx = full_index(inner)
            self.full_key = self._key(idx)
            self.pending, self.inlined = [], {}
            body = Seq(self.store_all([self._store_at(v, idx, full) for v in elem_outs]))
            kinds = ["serial"] * len(inner)
            kinds[-1] = "vectorized"
            for var, ext, kind in reversed(list(zip(inner, red_extents, kinds))):
                body = For(var, ext, kind, body)
            stmts.append(body)
        body = Seq(stmts)
        kinds = default_loop_kinds(len(kept))
        if kinds:
            kinds[-1] = "serial" if len(kinds) > 1 else "parallel"
        for var, d, kind in reversed(list(zip(outer, kept, kinds))):
            body = For(var, from_sympy(d), kind, body)
        return self.primfunc(body)

    def _plan_cache(self, reds, full, out_level) -> dict:
        """Full-shape values with an expensive op that several passes need -> the output
        buffer the first pass stores them into."""
        passes = [[r.args[0]] for r in reds] + [[v for v in self.outputs if out_level[v] == "full"]]
        need: dict = {}
        for k, roots in enumerate(passes):       # values each pass computes (not reads)
            for v in self.upstream(roots, through=lambda b: not _is_reduction(b)):
                if v in self.producer and not _is_reduction(self.producer[v]):
                    need.setdefault(v, set()).add(k)
        plan, free = {}, [v for v in self.outputs if out_level[v] == "full"
                          and self.env.same_shape(v.type.shape, full)]
        for b in self.bindings:
            v = b.outvars[0]
            if len(need.get(v, ())) < 2 or b.callee.name not in EXPENSIVE or \
                    not self.env.same_shape(v.type.shape, full):
                continue
            target = v if v in free else next((o for o in free if o.type.dtype == v.type.dtype), None)
            if target is not None:
                free.remove(target)
                plan[v] = self.out_buffer[target]
        return plan


def _builder(sub: Function, kind: str) -> "_Builder":
    bindings, inputs, outputs = list(sub.bindings), list(sub.params), list(sub.results)
    if kind == "output_fusable":
        mm, bindings = bindings[0], bindings[1:]
        inputs = inputs + [mm.outvars[0]]
        outputs = [v for v in outputs if v is not mm.outvars[0]]
        if not bindings or not outputs:
            raise FusionError("a matmul group without an epilogue")
    if any(not isinstance(r, Var) for r in outputs):
        raise FusionError("a group result is a constant")
    return _Builder(sub.name, bindings, inputs, outputs, sub.bounds)


# FuseOps builds each group's program to check that it can; Legalize reuses that build.
_BUILT: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _build(sub: Function, kind: str) -> tuple[PrimFunc, list, list]:
    hit = _BUILT.get(sub)
    if hit is not None and hit[0] == kind:
        return hit[1]
    b = _builder(sub, kind)
    rows = kind == "reduction" or sub.attrs.get("epilogue") == "reduction"
    f = b.reduction() if rows else b.injective()
    _BUILT[sub] = (kind, (f, b.call_inputs, b.outputs))
    return f, b.call_inputs, b.outputs


def fused_primfunc(sub: Function, kind: str | None = None) -> PrimFunc:
    """The loop-level program of a fused sub-function (for a matmul group: its epilogue)."""
    return _build(sub, kind or sub.attrs.get("kind", "injective"))[0]


def call_site_values(b: Binding) -> dict:
    """For a call of a sub-function: its parameters and results -> the call's operands and
    results."""
    value_of = dict(zip(b.callee.params, b.args))
    value_of.update(zip(b.callee.results, b.outvars))
    return value_of


def lower_fused_call(b: Binding, name: str, defs: dict | None = None, views: bool = False) -> list:
    """A call of a fused sub-function as call_tir (after call_library for a matmul group;
    ``defs``, the enclosing function's producers, finds Gram products: ``gram``)."""
    sub: Function = b.callee
    kind = sub.attrs.get("kind", "injective")
    value_of = call_site_values(b)
    f, inputs, outputs = _build(sub, kind)
    f.name = name
    calls = []
    if kind == "output_fusable":
        mm = sub.bindings[0]
        dtype = mm.outvars[0].type.dtype
        if dtype not in BLAS:
            raise FusionError(f"no library matmul for {dtype}")
        mm_out = value_of.setdefault(mm.outvars[0], mm.outvars[0])
        args = [value_of.get(a, a) for a in mm.args]
        gram = gram_operand(mm, args, defs or {})
        if gram is not None:            # syrk fills one triangle; the epilogue reads it
            f = copy.deepcopy(f)
            read_lower_triangle(f, f.params[inputs.index(mm.outvars[0])])
            exported = mm.outvars[0] in sub.results
            tri = Var(mm_out.type) if exported else mm_out
            calls.append(Binding([tri], LibraryFunc(SYRK[dtype, gram[1]]), [gram[0]], {}, mm.source))
            if exported:                # the product is a result too: whole, mirrored
                calls.append(Binding([mm_out], mirror_program(tri.type, f"{name}_mirror"), [tri], {},
                                     mm.source))
            value_of[mm.outvars[0]] = tri
        else:
            name, args, params = gemm_call(mm, args, defs or {}, BLAS[dtype], views)
            calls.append(Binding([mm_out], LibraryFunc(name), args, params, mm.source))
    calls.append(Binding([value_of[v] for v in outputs], f, [value_of.get(v, v) for v in inputs],
                         {}, b.source))
    return calls
