"""A kernel's Python source -> its loop-level program (``tir.PrimFunc``), for one binding of
its dim names (to themselves for the generic program, to a caller's dims at a call site).

One walk over the source builds the program (``values.py`` says what each operator and
function means).  A local's dtype is the promotion of every value assigned to it, found by
rebuilding until the dtypes stop changing.
"""
from __future__ import annotations

import ast
import builtins

import numpy as np
import sympy

from .. import dtypes as dt
from .. import tir
from ..tir.analysis import mark_loop_kinds
from ..tir import BOOL, INDEX, Assign, Const, For, If, Load, Local, Op, Store, from_sympy
from ..shapes import dmax, dmin, floordiv, is_symbolic, normalize
from . import lang
from .values import (BINARY, BINOPS, BOTTOM, CMPS, UNARY, _CAST_TYPES, _DIM_OPS, _SUPPORTED_CALLS,
                     BufRef, Obj, Val, _has_load, _static, cast, join, lift, seq)


# ---------------------------------------------------------------------------------------
# The builder: one walk over the source
# ---------------------------------------------------------------------------------------

class Builder:
    def __init__(self, k, binding: dict, types: dict, taken: set):
        self.k, self.src = k, k.src
        self.types = types                 # local -> (dtype, weak) from the previous round
        self.seen: dict = {}               # local -> promotion of what this round assigns
        self.taken = taken
        self.buf: dict = {}
        for name, spec in k.params:
            shape = spec.resolve(binding)
            bname = name
            while bname in taken:
                bname += "_"
            taken.add(bname)
            self.buf[name] = tir.Buffer(bname, shape, spec.dtype)
        self.binding = binding
        self.env: dict = {}                # loop variables and static aliases
        self.ended: set = set()            # loop variables past their loop
        self.vars: dict = {}               # local -> tir.Var
        self.node_of: dict = {}            # id(tir load/store) -> ast node, for messages

    def fail(self, node, msg, cls=None):
        from ..errors import KernelSyntaxError
        self.src.error(node, msg, cls or KernelSyntaxError)

    # -- names ---------------------------------------------------------------------------
    def local_type(self, name):
        if name in self.k.fixed:
            return (self.k.fixed[name], False)
        return self.types.get(name) or BOTTOM

    def var(self, name) -> tir.Var:
        if name not in self.vars:
            self.vars[name] = tir.fresh(name, self.taken, self.local_type(name)[0])
        return self.vars[name]

    def lookup(self, node: ast.Name):
        n = node.id
        if n in self.env:
            return self.env[n]
        if n in self.k.locals:
            return Val(self.var(n), self.local_type(n)[1])
        if n in self.ended:
            self.fail(node, f"loop variable {n} is used after its loop")
        if n in self.buf:
            return BufRef(n, self.buf[n])
        if n in self.binding:
            return self.binding[n]
        if n in self.k.globals:
            return self.wrap(self.k.globals[n], node)
        if hasattr(builtins, n):
            return Obj(getattr(builtins, n))
        self.fail(node, f"name {n!r} is not defined")

    def wrap(self, v, node):
        if isinstance(v, (bool, int, float)):
            return v
        if isinstance(v, np.generic) and v.dtype in dt.SUPPORTED:
            return Val(Const(v.item(), v.dtype), False)
        if isinstance(v, np.ndarray) or type(v).__name__ == "Tracer":
            self.fail(node, f"the kernel captures an array ({getattr(node, 'id', '')}) from its "
                            f"enclosing scope; pass arrays as Buffer parameters", TypeError)
        return Obj(v)

    # -- expressions ---------------------------------------------------------------------
    def expr(self, node):
        m = getattr(self, "e_" + type(node).__name__, None)
        if m is None:
            self.fail(node, f"{type(node).__name__} expressions are not supported in kernels")
        return m(node)

    def rt(self, node) -> Val:
        v = self.expr(node)
        if isinstance(v, Val):
            return v
        if _static(v):
            return lift(v)
        self.fail(node, "not a scalar value", TypeError)

    def e_Constant(self, node):
        if isinstance(node.value, (bool, int, float)):
            return node.value
        self.fail(node, f"constant {node.value!r} is not a number", TypeError)

    def e_Name(self, node):
        return self.lookup(node)

    def e_Tuple(self, node):
        return tuple(self.expr(e) for e in node.elts)

    def e_Attribute(self, node):
        base = self.expr(node.value)
        if isinstance(base, BufRef):
            if node.attr == "shape":
                return tuple(base.buf.shape)
            if node.attr == "ndim":
                return len(base.buf.shape)
            self.fail(node, f"buffers have .shape and .ndim, not .{node.attr}")
        if isinstance(base, Obj) and hasattr(base.value, node.attr):
            return self.wrap(getattr(base.value, node.attr), node)
        self.fail(node, f"unknown attribute .{node.attr}")

    def e_Subscript(self, node):
        base = self.expr(node.value)
        if isinstance(base, BufRef):
            ld = Load(base.buf, self.index(node, base))
            self.node_of[id(ld)] = node
            return Val(ld)
        if isinstance(base, tuple):
            k = self.expr(node.slice)
            if isinstance(k, int) and not isinstance(k, bool) and -len(base) <= k < len(base):
                return base[k]
            self.fail(node, "a shape is indexed with a constant axis in range")
        self.fail(node, "only buffers and shapes can be indexed", TypeError)

    def index(self, node, ref: BufRef) -> tuple:
        sl = node.slice
        items = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        rank = len(ref.buf.shape)
        if len(items) != rank:
            self.fail(node, f"buffer {ref.name} has rank {rank}, indexed with {len(items)} "
                            f"indices (index every axis)", TypeError)
        out = []
        for ax, it in enumerate(items):
            v = self.expr(it)
            if isinstance(v, int) and not isinstance(v, bool) and v < 0:
                v = normalize(ref.buf.shape[ax] + v)       # x[-1] is the last element
            if (isinstance(v, int) and not isinstance(v, bool)) or is_symbolic(v):
                out.append(from_sympy(v))
            elif isinstance(v, Val) and v.e.dtype.kind in "iu":
                out.append(cast(v, INDEX))
            else:
                what = v.e.dtype if isinstance(v, Val) else type(v).__name__
                self.fail(it, f"index into {ref.name} axis {ax} must be an integer, got {what}",
                          TypeError)
        return tuple(out)

    def binop(self, node, opnode, a, b):
        name, uf, pyop = BINOPS[type(opnode)]
        if _static(a) and _static(b):
            if not is_symbolic(a) and not is_symbolic(b):
                try:
                    return pyop(a, b)
                except (ZeroDivisionError, OverflowError, ValueError):
                    pass
            elif type(opnode) in _DIM_OPS and not isinstance(a, float) and not isinstance(b, float):
                return _DIM_OPS[type(opnode)](a, b)
        if name == "pow" and isinstance(b, int) and not isinstance(b, bool) and b == 2:
            return self.typed(node, "mul", "multiply", [a, a])
        return self.typed(node, name, uf, [a, b])

    def typed(self, node, name, uf, args) -> Val:
        """``Op(name)`` on ``args`` with the dtypes NumPy's ``uf`` gives them (NEP 50)."""
        vals = [lift(a) if not isinstance(a, Val) else a for a in args]
        weak = all(v.weak for v in vals)       # Python scalars alone: their default dtypes
        ops = tuple(dt.python_type_of(v.e.dtype) if v.weak and not weak else np.dtype(v.e.dtype)
                    for v in vals)
        try:
            ins, outs = dt.resolve_ufunc(uf, ops)
        except TypeError as e:
            self.fail(node, str(e), TypeError)
        es = tuple(cast(v, d) for v, d in zip(vals, ins))
        return Val(Op(name, es, np.dtype(outs[0])), weak)

    def e_BinOp(self, node):
        if type(node.op) not in BINOPS:
            self.fail(node, f"operator {type(node.op).__name__} is not supported in kernels")
        return self.binop(node, node.op, self.expr(node.left), self.expr(node.right))

    def e_UnaryOp(self, node):
        v = self.expr(node.operand)
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.Not):
            if _static(v) and not is_symbolic(v):
                return not v
            return Val(Op("not", (self.truthy(node, v).e,), BOOL), True)
        if _static(v) and not is_symbolic(v) or is_symbolic(v) and isinstance(node.op, ast.USub):
            return -v if isinstance(node.op, ast.USub) else ~v
        if isinstance(node.op, ast.USub):
            return self.typed(node, "neg", "negative", [v])
        return self.typed(node, "not", "invert", [v])

    def truthy(self, node, v) -> Val:
        v = lift(v) if not isinstance(v, Val) else v
        if v.e.dtype == BOOL:
            return v
        return self.typed(node, "ne", "not_equal", [v, Val(Const(0, v.e.dtype), True)])

    def e_BoolOp(self, node):
        is_and = isinstance(node.op, ast.And)
        first = self.expr(node.values[0])
        if _static(first) and not is_symbolic(first):
            if bool(first) != is_and:             # short-circuits, as in Python
                return bool(first)
            if len(node.values) == 2:
                return self.expr_truth(node.values[1])
            rest = ast.copy_location(ast.BoolOp(op=node.op, values=node.values[1:]), node)
            return self.expr(rest)
        acc = self.truthy(node, first).e
        for vn in node.values[1:]:
            b = self.truthy(vn, self.expr(vn)).e
            if _has_load(b):                     # x[i] is read only when the left side allows
                c = Const(False, BOOL) if is_and else Const(True, BOOL)
                acc = Op("if_then_else", (acc, b, c) if is_and else (acc, c, b), BOOL)
            else:
                acc = Op("and" if is_and else "or", (acc, b), BOOL)
        return Val(acc, False)

    def expr_truth(self, node):
        v = self.expr(node)
        if _static(v) and not is_symbolic(v):
            return bool(v)
        return self.truthy(node, v)

    def e_Compare(self, node):
        out, left = None, self.expr(node.left)
        for opn, rn in zip(node.ops, node.comparators):
            if type(opn) not in CMPS:
                self.fail(node, f"comparison {type(opn).__name__} is not supported in kernels")
            right = self.expr(rn)
            name, uf, pyop = CMPS[type(opn)]
            r = None
            if _static(left) and _static(right):
                r = pyop(left, right)
                if isinstance(r, sympy.logic.boolalg.BooleanAtom):
                    r = bool(r)
                elif not isinstance(r, bool):
                    r = None
            if r is None:
                r = self.typed(node, name, uf, [left, right])
            out = r if out is None else (out and r if isinstance(out, bool) and isinstance(r, bool)
                                         else Val(Op("and", (lift(out).e, lift(r).e), BOOL), False))
            left = right
        return out

    def e_IfExp(self, node):
        c = self.expr_truth(node.test)
        if isinstance(c, bool):
            return self.expr(node.body if c else node.orelse)
        a, b = self.rt(node.body), self.rt(node.orelse)
        d, w = join(a.type, b.type)
        return Val(Op("if_then_else", (c.e, cast(a, d), cast(b, d)), d), w)

    def callee(self, node):
        f = self.expr(node.func)
        if not isinstance(f, Obj):
            self.fail(node, "only functions can be called", TypeError)
        return f.value

    def e_Call(self, node):
        f = self.callee(node)
        if node.keywords:
            self.fail(node, "keyword arguments are not supported in kernel calls")
        if f in (builtins.range, lang.prange, lang.grid):
            self.fail(node, "range(...), rj.prange(...) and rj.grid(...) are only for `for` loops")
        if any(isinstance(a, ast.Starred) for a in node.args):
            self.fail(node, "starred arguments are only for rj.grid(*x.shape)")
        args = [self.expr(a) for a in node.args]
        if f is builtins.len and len(args) == 1 and isinstance(args[0], BufRef) and args[0].buf.shape:
            return args[0].buf.shape[0]
        if f in _CAST_TYPES:
            return Val(cast(self.one(node, args), np.dtype(f)), False)
        if f in (builtins.float, builtins.int, builtins.bool):
            v = self.one(node, args)
            if _static(v) and not is_symbolic(v):
                return f(v)
            if f is builtins.bool:
                return Val(self.truthy(node, v).e, True)
            d = np.dtype("float64" if f is builtins.float else "int64")
            return Val(cast(lift(v), d), True)
        if f in UNARY and len(args) == 1:
            return self.math(node, f, UNARY[f], args)
        if f in BINARY and len(args) >= 2 and (len(args) == 2 or f in (builtins.min, builtins.max)):
            out = args[0]
            for a in args[1:]:
                out = self.math(node, f, BINARY[f], [out, a])
            return out
        self.fail(node, f"calls to {getattr(f, '__qualname__', f)!r} with {len(args)} arguments are "
                        f"not supported in kernels (supported: {_SUPPORTED_CALLS})")

    def one(self, node, args):
        if len(args) != 1:
            self.fail(node, "takes one argument", TypeError)
        return args[0]

    def math(self, node, f, spec, args):
        if all(_static(a) for a in args):
            if any(is_symbolic(a) for a in args):
                if f is builtins.min or f is builtins.max:
                    return (dmin if f is builtins.min else dmax)(*args)
            else:
                r = f(*args)
                return r.item() if isinstance(r, np.generic) else r
        return self.typed(node, spec[0], spec[1], args)

    # -- statements ----------------------------------------------------------------------
    def block(self, stmts) -> list:
        out = []
        for s in stmts:
            for name in self.k.zero_before.get(id(s), ()):
                v = self.var(name)
                out.append(Local(v, Const(False if v.dtype == BOOL else 0.0 if v.dtype.kind == "f"
                                          else 0, v.dtype)))
            out.extend(self.stmt(s))
        return out

    def stmt(self, s) -> list:
        m = getattr(self, "s_" + type(s).__name__, None)
        if m is None:
            self.fail(s, f"{type(s).__name__} statements are not supported in kernels")
        return m(s)

    def s_Pass(self, s):
        return []

    def s_Expr(self, s):
        if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
            return []                                       # a docstring
        self.fail(s, "an expression statement has no effect in a kernel (assign or store it)")

    def s_Return(self, s):
        if s.value is None and s is self.src.fdef.body[-1]:
            return []
        self.fail(s, "kernels return nothing: they write their output buffers")

    def s_Assign(self, s):
        value = self.expr(s.value)
        return [st for t in s.targets for st in self.assign(s, t, value)]

    def s_AnnAssign(self, s):
        if not isinstance(s.target, ast.Name):
            self.fail(s, "annotations are for local names (acc: rj.float32 = 0.0)")
        return [] if s.value is None else self.assign_name(s, s.target, self.expr(s.value))

    def s_AugAssign(self, s):
        if type(s.op) not in BINOPS:
            self.fail(s, f"operator {type(s.op).__name__} is not supported in kernels")
        t = s.target
        if isinstance(t, ast.Name):
            return self.assign_name(s, t, self.binop(s, s.op, self.lookup(t), self.expr(s.value)))
        ref = self.expr(t.value) if isinstance(t, ast.Subscript) else None
        if not isinstance(ref, BufRef):
            self.fail(s, "only names and buffer elements can be assigned")
        idx = self.index(t, ref)
        ld = Load(ref.buf, idx)
        self.node_of[id(ld)] = t
        return self.store_at(t, ref, idx, self.binop(s, s.op, Val(ld), self.expr(s.value)))

    def assign(self, s, t, value) -> list:
        if isinstance(t, ast.Name):
            return self.assign_name(s, t, value)
        if isinstance(t, ast.Subscript):
            ref = self.expr(t.value)
            if not isinstance(ref, BufRef):
                self.fail(t, "only buffers can be stored into", TypeError)
            return self.store_at(t, ref, self.index(t, ref), value)
        if isinstance(t, ast.Tuple):
            if not isinstance(value, tuple) or len(value) != len(t.elts):
                self.fail(s, "cannot unpack: the right side is not a tuple of that length")
            return [st for tt, v in zip(t.elts, value) for st in self.assign(s, tt, v)]
        self.fail(s, f"cannot assign to {type(t).__name__}")

    def assign_name(self, s, t, value) -> list:
        n = t.id
        if n in self.buf or n in self.binding:
            self.fail(s, f"cannot assign to {n}: it names a buffer or a dim of the kernel")
        if n in self.k.aliases and not isinstance(value, Val):
            self.env[n] = value                  # assigned once with a static value: a constant
            return []
        if not isinstance(value, Val) and not _static(value):
            self.fail(s, f"only scalars can be assigned to locals ({n} is assigned more than once "
                         f"or inside a loop or branch)", TypeError)
        v = lift(value)
        if n not in self.k.fixed:
            self.seen[n] = join(self.seen.get(n), v.type)
        var = self.var(n)
        e = cast(v, var.dtype)
        return [Local(var, e) if self.k.init_at.get(id(s)) == n else Assign(var, e)]

    def store_at(self, t, ref: BufRef, idx, value) -> list:
        if ref.name not in self.k.outputs:
            self.fail(t, f"store to input buffer {ref.name}", TypeError)
        if not isinstance(value, Val) and not _static(value):
            self.fail(t, "only scalars can be stored", TypeError)
        st = Store(ref.buf, idx, cast(lift(value), ref.buf.dtype))
        self.node_of[id(st)] = t
        return [st]

    def s_If(self, s):
        c = self.expr_truth(s.test)
        if isinstance(c, bool):                  # decided while building: one branch
            return self.block(s.body if c else s.orelse)
        els = self.block(s.orelse)
        return [If(c.e, seq(self.block(s.body)), seq(els) if els else None)]

    def bound(self, node, v) -> tir.Expr:
        if (isinstance(v, int) and not isinstance(v, bool)) or is_symbolic(v):
            return from_sympy(normalize(v))
        if isinstance(v, Val) and v.e.dtype.kind in "iu":
            return cast(v, INDEX)
        self.fail(node, "loop bounds must be integers", TypeError)

    def s_For(self, s):
        call = s.iter
        f = self.callee(call) if isinstance(call, ast.Call) else None
        if f not in (builtins.range, lang.prange, lang.grid) or call.keywords:
            self.fail(s, "for loops iterate over range(...), rj.prange(...) or rj.grid(...)")
        targets = s.target.elts if isinstance(s.target, ast.Tuple) else [s.target]
        independent = f is lang.prange
        if f is not lang.grid:
            args = [self.expr(a) for a in call.args]
            if not 1 <= len(args) <= 3 or len(targets) != 1:
                self.fail(s, f"for i in {'rj.prange' if independent else 'range'}(stop), (start, stop) or "
                             f"(start, stop, step)")
            specs = [(0, args[0], 1) if len(args) == 1 else tuple(args) + (1,) * (3 - len(args))]
        else:
            exts = []
            for a in call.args:
                v = self.expr(a.value if isinstance(a, ast.Starred) else a)
                exts.extend(v if isinstance(a, ast.Starred) and isinstance(v, tuple) else [v])
            if len(targets) != len(exts) or not exts:
                self.fail(s, f"rj.grid with {len(exts)} extents needs {len(exts)} loop variables")
            specs = [(0, e, 1) for e in exts]
        loops = []
        for tn, (start, stop, step) in zip(targets, specs):
            if not isinstance(tn, ast.Name):
                self.fail(s, "loop variables are plain names")
            if tn.id in self.env or tn.id in self.buf or tn.id in self.binding:
                self.fail(s, f"loop variable {tn.id} reuses the name of a loop variable, buffer or dim")
            lo, hi = self.bound(s, start), self.bound(s, stop)
            if step == 1:
                var = tir.fresh(tn.id, self.taken)
                loops.append(For(var, hi, "serial", None, lo, independent))
                self.env[tn.id] = Val(var, True)
                continue
            if not isinstance(step, int) or isinstance(step, bool) or step == 0:
                self.fail(s, "a range step must be a non-zero integer constant")
            a, b = (stop, start) if step < 0 else (start, stop)
            if all(isinstance(v, int) or is_symbolic(v) for v in (a, b)):
                count = from_sympy(floordiv(normalize(sympy.expand(sympy.sympify(b) - a + abs(step) - 1)),
                                            abs(step)))
            else:
                a, b = (hi, lo) if step < 0 else (lo, hi)
                count = (b - a + Const(abs(step) - 1, INDEX)) // Const(abs(step), INDEX)
            var = tir.fresh(tn.id, self.taken)
            loops.append(For(var, count, "serial", None, independent=independent))
            off = var * Const(abs(step), INDEX)
            self.env[tn.id] = Val(lo + off if step > 0 else lo - off, True)
        body = seq(self.block(s.body))
        for lp in reversed(loops):
            lp.body, body = body, lp
        for tn, lp in zip(targets, loops):
            del self.env[tn.id]
            self.ended.add(tn.id)
            self.taken.discard(lp.var.name)       # a later loop may reuse the name
        return [body]


def build_primfunc(k, binding: dict, name: str):
    """The program of kernel ``k`` with its dim names bound to ``binding`` (name -> dim);
    returns (PrimFunc, {id(load/store): ast node})."""
    types: dict = {}
    for _ in range(16):
        taken = {s.name for d in binding.values() if is_symbolic(d) for s in d.free_symbols}
        b = Builder(k, binding, types, taken)
        body = seq(b.block(k.src.fdef.body))
        new = {n: join(types.get(n), t) for n, t in b.seen.items()}
        if new == types:
            break
        types = new
    else:
        raise AssertionError(f"kernel {k.name}: the dtypes of its locals do not settle")
    params = [b.buf[p] for p, _ in k.params]
    body = mark_loop_kinds(body)
    # indices the kernel reads from data are checked at run time (tir.index_checks); what
    # it leaves unwritten is 0 everywhere
    f = tir.PrimFunc(name, params, len(k.outputs), tir.dim_vars(params), body,
                     check_data_indices=True, zero_outputs=True)
    tir.verify_primfunc(f)
    return f, b.node_of
