"""The loop level of the cross-level IR: tensor programs (``PrimFunc``) over buffers with
symbolic shapes, in destination-passing style (outputs are the last buffers).

A program is a tree of statements (``For`` loops with symbolic extents, ``Store``, local
scalars, ``If``) over scalar expressions (``Op`` named like the graph primitives, ``Load``,
``Const``, ``Var``).  Index arithmetic is int64.  Backends (LLVM, CUDA) render these nodes;
they never see graph primitives.  Loop kinds say what a backend may do with a loop:
``parallel`` (iterations independent: split across threads), ``vectorized`` (innermost and
independent), ``reduction`` (carries an accumulator), ``serial``.
"""
from __future__ import annotations

import functools

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import sympy

from .. import dimpoly
from .. import dtypes as dt
from ..shapes import Dim, dim_str, free_symbols, is_symbolic

INDEX = np.dtype("int64")
BOOL = np.dtype("bool")
LOOP_KINDS = ("serial", "parallel", "vectorized", "reduction")


# ---------------------------------------------------------------------------------------
# Expressions
# ---------------------------------------------------------------------------------------

class Expr:
    __slots__ = ()
    dtype: np.dtype

    # Builders for int64 index arithmetic; scalar math uses ``op`` with explicit names.
    def __add__(self, o): return op("add", self, o)
    def __radd__(self, o): return op("add", o, self)
    def __sub__(self, o): return op("sub", self, o)
    def __rsub__(self, o): return op("sub", o, self)
    def __mul__(self, o): return op("mul", self, o)
    def __rmul__(self, o): return op("mul", o, self)
    def __floordiv__(self, o): return op("floor_div", self, o)
    def __mod__(self, o): return op("rem", self, o)

    def __str__(self) -> str:
        return expr_str(self)


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: object
    dtype: np.dtype


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """A loop variable, a local scalar or a dim variable (by name)."""
    name: str
    dtype: np.dtype = INDEX


@dataclass(frozen=True, eq=False)
class Op(Expr):
    """An elementwise operation named like its graph primitive ("add", "exp", "select",
    "convert", ...).  ``flags``: "reassoc" lets a reduction update be reordered."""
    name: str
    args: tuple
    dtype: np.dtype
    flags: tuple = ()


@dataclass(frozen=True, eq=False)
class Load(Expr):
    buffer: "Buffer"
    index: tuple

    @property
    def dtype(self):
        return self.buffer.dtype


_CMP = {"eq", "ne", "lt", "le", "gt", "ge", "is_nan", "is_inf", "is_finite"}


def as_expr(v, dtype=None) -> Expr:
    if isinstance(v, Expr):
        return v
    if isinstance(v, (bool, np.bool_)):
        return Const(bool(v), BOOL)
    if isinstance(v, (int, np.integer)):
        return Const(int(v), np.dtype(dtype or INDEX))
    if isinstance(v, (float, np.floating)):
        return Const(float(v), np.dtype(dtype or "float64"))
    if isinstance(v, sympy.Basic):
        return from_sympy(v)
    raise TypeError(f"not a loop-level expression: {v!r}")


def op(name: str, *args, dtype=None, flags: tuple = ()) -> Expr:
    """An ``Op``; the result dtype defaults to bool for comparisons, else the first operand's."""
    xs = [as_expr(a) for a in args]
    if dtype is None:
        vals = xs[1:] if name in ("select", "if_then_else") else xs
        dtype = BOOL if name in _CMP else next((a.dtype for a in vals if not isinstance(a, Const)),
                                                vals[0].dtype)
    if len(xs) == 2 and name in _INFIX:     # Python ints in builders take the other side's dtype
        ref = next((a.dtype for a in xs if not isinstance(a, Const)), xs[0].dtype)
        xs = [Const(a.value, ref) if isinstance(a, Const) and a.dtype != ref else a for a in xs]
    # fold integer index arithmetic on constants, so printed loops stay readable
    if dtype == INDEX and all(isinstance(a, Const) for a in xs) and name in _FOLD:
        return Const(_FOLD[name](*(a.value for a in xs)), INDEX)
    if dtype == INDEX and len(xs) == 2:
        a, b = xs
        if name == "add" and _is(b, 0): return a
        if name == "add" and _is(a, 0): return b
        if name == "sub" and _is(b, 0): return a
        if name == "mul" and (_is(a, 0) or _is(b, 0)): return Const(0, INDEX)
        if name == "mul" and _is(b, 1): return a
        if name == "mul" and _is(a, 1): return b
        if name == "floor_div" and _is(b, 1): return a
    return Op(name, tuple(xs), np.dtype(dtype), tuple(flags))


def _is(e, v) -> bool:
    return isinstance(e, Const) and e.value == v


_FOLD = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "floor_div": lambda a, b: a // b if b else 0, "rem": lambda a, b: a % b if b else 0,
         "max": max, "min": min}


def from_sympy(e: Dim) -> Expr:
    """A symbolic dim as an int64 expression over dim variables (named like the symbols).
    Nodes are immutable, so a dim converted again gets the same expression (every kernel
    converts its buffers' shapes, and SymPy's ``together`` of a floor costs a millisecond)."""
    if isinstance(e, (int, np.integer)):
        return Const(int(e), INDEX)
    return _from_sympy(e)


@functools.lru_cache(maxsize=8192)
def _from_sympy(e) -> Expr:
    if e.is_Integer:
        return Const(int(e), INDEX)
    if e.is_Symbol:
        return Var(e.name, INDEX)
    if e.is_Add:
        out = None
        for t in e.args:
            x = from_sympy(t)
            out = x if out is None else out + x
        return out
    if e.is_Mul:
        c, rest = e.as_coeff_Mul()
        if c.is_Rational and not c.is_Integer:      # exact by construction (proved divisible)
            num, den = sympy.fraction(sympy.together(e))
            return from_sympy(num) // from_sympy(den)
        out = Const(int(c), INDEX)
        for f in sympy.Mul.make_args(rest):
            out = out * from_sympy(f)
        return out
    if e.is_Pow and e.exp.is_Integer and int(e.exp) >= 0:
        out = Const(1, INDEX)
        for _ in range(int(e.exp)):
            out = out * from_sympy(e.base)
        return out
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        return from_sympy(num) // from_sympy(den)
    if isinstance(e, sympy.ceiling):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        return Const(0, INDEX) - ((Const(0, INDEX) - from_sympy(num)) // from_sympy(den))
    if isinstance(e, sympy.Mod):
        return from_sympy(e.args[0]) % from_sympy(e.args[1])
    if isinstance(e, (sympy.Min, sympy.Max)):
        name = "min" if isinstance(e, sympy.Min) else "max"
        args = [from_sympy(a) for a in e.args]
        out = args[0]
        for a in args[1:]:
            out = op(name, out, a)
        return out
    raise NotImplementedError(f"dim expression {dim_str(e)} has no loop-level form")


_TO_SYMPY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
             "neg": lambda a: -a, "convert": lambda a: a,
             "floor_div": lambda a, b: sympy.floor(a / b), "rem": sympy.Mod}


def to_sympy(e: Expr, var) -> Dim | None:
    """An index expression as a sympy expression, the inverse of ``from_sympy``, for proofs
    about indices.  ``var(v)`` gives the sympy form of a variable (None: unknown).  None when
    any part has no integer meaning (a load, a float, an op other than integer arithmetic)."""
    if isinstance(e, Const):
        return sympy.Integer(int(e.value)) if e.dtype.kind in "iu" else None
    if isinstance(e, Var):
        return var(e)
    if isinstance(e, Op) and e.dtype == INDEX and e.name in _TO_SYMPY:
        args = [to_sympy(x, var) for x in e.args]
        return None if any(a is None for a in args) else _TO_SYMPY[e.name](*args)
    return None


_TO_POLY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
            "neg": lambda a: -a, "convert": lambda a: a, "floor_div": dimpoly.floordiv,
            "rem": dimpoly.mod, "min": lambda a, b: dimpoly.minmax("min", (a, b)),
            "max": lambda a, b: dimpoly.minmax("max", (a, b))}


def index_poly(e: Expr, memo: dict | None = None) -> dimpoly.Poly:
    """An integer index expression as a dim polynomial over its variables (by name), for
    exact equality tests without SymPy.  Raises ``dimpoly.Unsupported`` where a part has no
    integer meaning (a load, a float, an op other than integer arithmetic)."""
    memo = {} if memo is None else memo
    r = memo.get(id(e))
    if r is not None:
        return r
    if isinstance(e, Const) and e.dtype.kind in "iu":
        r = dimpoly.const(int(e.value))
    elif isinstance(e, Var) and e.dtype.kind in "iu":
        r = dimpoly.var(e.name)
    elif isinstance(e, Op) and e.dtype == INDEX and e.name in _TO_POLY:
        r = _TO_POLY[e.name](*(index_poly(x, memo) for x in e.args))
    else:
        raise dimpoly.Unsupported(f"{expr_str(e)} is not integer index arithmetic")
    memo[id(e)] = r
    return r


# ---------------------------------------------------------------------------------------
# Buffers, statements, programs
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Buffer:
    """A dense row-major array with a symbolic shape."""
    name: str
    shape: tuple
    dtype: np.dtype

    def __getitem__(self, index) -> Load:
        index = index if isinstance(index, tuple) else (index,)
        return Load(self, tuple(as_expr(i) for i in index))

    def type_str(self) -> str:
        return f"{dt.short_name(self.dtype)}[{', '.join(dim_str(d) for d in self.shape)}]"


class Stmt:
    __slots__ = ()

    def __str__(self) -> str:
        return "\n".join(_stmt_lines(self, 0))


@dataclass(eq=False)
class For(Stmt):
    var: Var
    extent: Expr
    kind: str
    body: Stmt
    start: Expr = field(default_factory=lambda: Const(0, INDEX))
    # the kernel's author says the iterations are independent (``rj.prange``)
    independent: bool = False


@dataclass(eq=False)
class Store(Stmt):
    buffer: Buffer
    index: tuple
    value: Expr


@dataclass(eq=False)
class Local(Stmt):
    """Declare a mutable local scalar (an accumulator) with its initial value."""
    var: Var
    init: Expr


@dataclass(eq=False)
class Assign(Stmt):
    var: Var
    value: Expr


@dataclass(eq=False)
class If(Stmt):
    cond: Expr
    then: Stmt
    else_: Stmt | None = None


@dataclass(eq=False)
class Seq(Stmt):
    stmts: list


@dataclass(eq=False)
class PrimFunc:
    """A loop-level tensor program: ``params`` are buffers (inputs first, then the
    ``n_outputs`` outputs it writes), ``dim_vars`` the symbolic dims it takes as integers."""
    name: str
    params: list
    n_outputs: int
    dim_vars: list
    body: Stmt
    # Run-time checks the caller makes before the call, for what the loops cannot report:
    # ("index_range", operand position, axis size, axis) says that operand holds indices
    # into an axis of that size (negative ones count from the end), as NumPy checks them.
    host_checks: list = field(default_factory=list)
    # Indices read from data are compared with their axis sizes where they are used (user
    # kernels: see ``tir.index_checks``)
    check_data_indices: bool = False
    # The outputs start as zeros (user kernels: an element the kernel does not write reads 0
    # on every backend and eagerly, as the zero-filled outputs of the Python function would)
    zero_outputs: bool = False
    call_kind = "tir"

    @property
    def inputs(self) -> list:
        return self.params[:len(self.params) - self.n_outputs]

    @property
    def outputs(self) -> list:
        return self.params[len(self.params) - self.n_outputs:]

    def __str__(self) -> str:
        ps = ", ".join(f"{b.name}: {b.type_str()}" for b in self.params)
        dims = "; " + ", ".join(self.dim_vars) if self.dim_vars else ""
        head = f"@tir\ndef {self.name}({ps}{dims}):"
        return head + "\n" + "\n".join(_stmt_lines(self.body, 1))

    text = __str__

    def signature_text(self) -> str:
        """The program's text with its name left out: equal texts compute the same thing."""
        return str(self).split("\n", 2)[2] + "|" + ",".join(b.type_str() for b in self.params)


# ---------------------------------------------------------------------------------------
# Printing
# ---------------------------------------------------------------------------------------

# Python's precedences: comparisons < | < ^ < & < + - < * / // %
_INFIX = {"add": ("+", 4), "sub": ("-", 4), "mul": ("*", 5), "div": ("/", 5), "floor_div": ("//", 5),
          "rem": ("%", 5), "eq": ("==", 0), "ne": ("!=", 0), "lt": ("<", 0), "le": ("<=", 0),
          "gt": (">", 0), "ge": (">=", 0), "and": ("&", 3), "or": ("|", 1), "xor": ("^", 2)}


def expr_str(e: Expr, outer: int = 0) -> str:
    if isinstance(e, Const):
        if e.dtype == INDEX or e.dtype == BOOL:
            return str(e.value)
        return f"{dt.short_name(e.dtype)}({e.value!r})"
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Load):
        return f"{e.buffer.name}[{', '.join(expr_str(i) for i in e.index)}]"
    assert isinstance(e, Op)
    if e.name in _INFIX and len(e.args) == 2:
        sym, prec = _INFIX[e.name]
        s = f"{expr_str(e.args[0], prec + (prec == 0))} {sym} {expr_str(e.args[1], prec + 1)}"
        return f"({s})" if prec < outer else s
    if e.name == "convert":
        return f"{dt.short_name(e.dtype)}({expr_str(e.args[0])})"
    return f"{e.name}({', '.join(expr_str(a) for a in e.args)})"


def _stmt_lines(s: Stmt, depth: int) -> list:
    pad = "  " * depth
    if isinstance(s, Seq):
        return [line for x in s.stmts for line in _stmt_lines(x, depth)]
    if isinstance(s, For):
        kind = "" if s.kind == "serial" else s.kind + " "
        rng = str(s.extent) if _is(s.start, 0) else f"{s.start}, {s.extent}"
        return [f"{pad}{kind}for {s.var.name} in range({rng}):"] + _stmt_lines(s.body, depth + 1)
    if isinstance(s, Store):
        return [f"{pad}{s.buffer.name}[{', '.join(expr_str(i) for i in s.index)}] = {s.value}"]
    if isinstance(s, Local):
        return [f"{pad}{s.var.name}: {dt.short_name(s.var.dtype)} = {s.init}"]
    if isinstance(s, Assign):
        return [f"{pad}{s.var.name} = {s.value}"]
    if isinstance(s, If):
        out = [f"{pad}if {s.cond}:"] + _stmt_lines(s.then, depth + 1)
        if s.else_ is not None:
            out += [f"{pad}else:"] + _stmt_lines(s.else_, depth + 1)
        return out
    raise TypeError(f"not a statement: {s!r}")


def fresh(name: str, taken: set, dtype=INDEX) -> Var:
    """A variable named ``name`` (or ``name_``, ...) that no other name in ``taken`` uses."""
    while name in taken:
        name += "_"
    taken.add(name)
    return Var(name, np.dtype(dtype))


def loop_nest(extents: Sequence[Expr], body_fn, kinds: Sequence[str], taken: set,
              prefix: str = "i", drop_unit: bool = False) -> Stmt:
    """Nested loops ``for i0 in range(e0): for i1 ...: body_fn([i0, i1, ...])``.

    ``drop_unit`` (a nest of independent iterations): an axis of extent 1 gets index 0 and
    no loop, and its loop's kind passes to the nearest serial loop -- "vectorized" inward,
    "parallel" outward -- so that ``(n, m, 1)`` vectorizes along m (keepdims shapes, the
    trailing 2 of packed complex values split in halves), not along a loop of one."""
    extents = [as_expr(e) for e in extents]
    kinds = list(kinds)
    unit = [drop_unit and isinstance(e, Const) and e.value == 1 for e in extents]
    real = [k for k, u in enumerate(unit) if not u]
    if real and any(unit):
        dropped = {kinds[k] for k, u in enumerate(unit) if u}
        if "vectorized" in dropped and kinds[real[-1]] == "serial":
            kinds[real[-1]] = "vectorized"
        if "parallel" in dropped and kinds[real[0]] == "serial":
            kinds[real[0]] = "parallel"
    vars_ = [Const(0, INDEX) if u else fresh(f"{prefix}{k}", taken) for k, u in enumerate(unit)]
    stmt = body_fn(vars_)
    for v, e, kind, u in reversed(list(zip(vars_, extents, kinds, unit))):
        if not u:
            stmt = For(v, e, kind, stmt)
    return stmt


def dim_vars(*things) -> list:
    """The names of the dims that buffers' shapes and symbolic values in ``things`` (nested
    lists, tuples, dicts) use, sorted: a program's ``dim_vars``."""
    syms: set = set()
    stack = [things]
    while stack:
        x = stack.pop()
        if isinstance(x, (tuple, list)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, Buffer):
            stack.append(x.shape)
        elif is_symbolic(x):
            syms.update(free_symbols(x))
    return sorted(s.name for s in syms)

