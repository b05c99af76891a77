"""Symbolic dimensions: expressions over dim variables, and the environment that decides
relations between them.

A dimension inside relaxjax (a ``Dim``) is a Python ``int`` or a sympy expression over
integer symbols (``n``, ``n*4``, ``n // 2``, ``min(n, 5)``).  Users see symbolic ones wrapped
in :class:`SymbolicDim`, which supports arithmetic and comparisons.

Every relation a shape rule needs goes through a :class:`ShapeEnv`:

* ``try_prove`` decides it from algebra (sympy) and interval bounds, or returns None;
* in *explicit* mode an undecided relation is an :class:`InconclusiveDimensionError`;
* in *automatic* mode (``@jit`` without ``shapes=``) each input symbol has a concrete value
  from the first call, so the relation is evaluated, recorded as a *guard* on the cache
  entry, and, for an equality, one symbol is replaced by the other from then on.
"""
from __future__ import annotations

import functools
import keyword
import math
import operator
import threading
from fractions import Fraction
from typing import Any, Callable, Iterable, Sequence, Union

import numpy as np
import sympy

from . import dimpoly
from .errors import InconclusiveDimensionError, ShapeError

Dim = Union[int, sympy.Expr]
INF = math.inf
DEFAULT_BOUNDS = (1, INF)
_RESERVED = {"min", "max"}


# ---------------------------------------------------------------------------------------
# Expressions
# ---------------------------------------------------------------------------------------

_SYMBOLS: dict[str, sympy.Symbol] = {}


def symbol(name: str) -> sympy.Symbol:
    """The dim variable called ``name`` (one sympy Symbol per name)."""
    s = _SYMBOLS.get(name)
    if s is None:
        if not name.isidentifier() or keyword.iskeyword(name) or name in _RESERVED:
            raise ValueError(f"invalid dim name {name!r}: use a Python identifier "
                             f"other than {sorted(_RESERVED)}")
        s = _SYMBOLS[name] = sympy.Symbol(name, integer=True, nonnegative=True)
    return s


def normalize(e: Any) -> Dim:
    """Integers become Python ints; everything else stays a sympy expression."""
    if isinstance(e, int):
        return e
    if isinstance(e, sympy.Basic) and e.is_Integer:
        return int(e)
    return e


def is_symbolic(d: Any) -> bool:
    return isinstance(d, sympy.Basic)


def free_symbols(d: Dim) -> frozenset:
    return _free_symbols(d) if isinstance(d, sympy.Basic) else frozenset()


@functools.lru_cache(maxsize=1 << 16)
def _free_symbols(d: sympy.Basic) -> frozenset:
    # (SymPy walks the expression on every call; passes ask for the same dims' symbols
    # thousands of times: DCE, printing, memory planning)
    return frozenset(d.free_symbols)


def same_dim(a: Dim, b: Dim) -> bool:
    """``a == b`` for every value of their dims: compared as dim polynomials (exact and
    one-sided: different forms are treated as different), SymPy's simplifier only for what
    those cannot express."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if a == b:
        return True
    try:
        return dimpoly.from_sympy(a) == dimpoly.from_sympy(b)
    except dimpoly.Unsupported:
        return sympy.simplify(sympy.sympify(a) - b) == 0


def floordiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if isinstance(b, int) and b > 0:
        # a constant divisor (pooling, strides): exact when it divides every coefficient,
        # else a floor -- without SymPy's polynomial cancellation, the slow part of tracing
        # a network's shapes
        terms = sympy.expand(a).as_coefficients_dict()
        if all(c.is_Integer and int(c) % b == 0 for c in terms.values()):
            return normalize(sympy.expand(sympy.sympify(a) / b))
        return normalize(sympy.floor(sympy.sympify(a) / b))
    q = sympy.cancel(sympy.sympify(a) / b)
    if _integer_polynomial(q):
        # b divides a as polynomials: a // b is the quotient itself ((2n + 2) * m // (n + 1)
        # is 2 * m, not a floor of a fraction the prover cannot see through)
        return normalize(sympy.expand(q))
    return normalize(sympy.floor(sympy.sympify(a) / b))


def _integer_polynomial(e: sympy.Expr) -> bool:
    """``e`` is a polynomial in its symbols with integer coefficients."""
    if e.is_Integer:
        return True
    if not e.free_symbols or not e.is_polynomial(*e.free_symbols):
        return False
    return all(c.is_Integer for c in sympy.Poly(e, *sorted(e.free_symbols, key=str)).coeffs())


def mod(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    return normalize(sympy.Mod(a, b))


def dmin(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return normalize(sympy.Min(a, b))


def dmax(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    return normalize(sympy.Max(a, b))


def prod(dims: Iterable[Dim]) -> Dim:
    out: Dim = 1
    for d in dims:
        out = out * d if not (isinstance(out, int) and out == 1) else d
    return normalize(out)


# ---------------------------------------------------------------------------------------
# Printing (the same text is valid Python, used to compile evaluators)
# ---------------------------------------------------------------------------------------

_PRINT_CACHE: dict = {}


def dim_str(d: Dim, names: dict | None = None) -> str:
    """``d`` as Python source; ``names`` renames its dims (printed, not substituted: a
    substitution rebuilds ``min``/``max`` terms, which SymPy re-simplifies at length)."""
    if isinstance(d, int):
        return str(d)
    if names:
        return _pr(d, 0, names)
    s = _PRINT_CACHE.get(d)
    if s is None:
        s = _PRINT_CACHE[d] = _pr(d, 0)
    return s


# precedences: 0 = top, 1 = additive, 2 = multiplicative, 3 = atom/unary
def _paren(s: str, inner: int, outer: int) -> str:
    return f"({s})" if inner < outer else s


def _pr(e: sympy.Expr, outer: int, names: dict | None = None) -> str:
    if e.is_Integer:
        v = int(e)
        return _paren(str(v), 1 if v < 0 else 3, outer)
    if e.is_Symbol:
        return names.get(e.name, e.name) if names else e.name
    if e.is_Add:
        # positive symbolic terms first, then negative ones, constant last ("2 - n" if alone)
        def order(t):
            neg = bool(t.as_coeff_Mul()[0] < 0)
            return (2 if t.is_Number else int(neg), sympy.default_sort_key(t))
        terms = sorted(e.args, key=order)
        if bool(terms[0].as_coeff_Mul()[0] < 0) and terms[-1].is_Number and bool(terms[-1] > 0):
            terms = [terms[-1]] + terms[:-1]
        out = _pr(terms[0], 1, names)
        for t in terms[1:]:
            c, rest = t.as_coeff_Mul()
            if c < 0:
                out += " - " + _pr(-t, 2, names)
            else:
                out += " + " + _pr(t, 2, names)
        return _paren(out, 1, outer)
    if e.is_Mul:
        c, rest = e.as_coeff_Mul()
        if c == -1:
            return _paren("-" + _pr(rest, 3, names), 1, outer)
        if c.is_Rational and not c.is_Integer:
            num, den = sympy.fraction(sympy.together(e))
            return _paren(f"{_pr(num, 2, names)} / {_pr(den, 3, names)}", 2, outer)
        factors = [f for f in sympy.Mul.make_args(rest)]
        # Python's * and // and % associate left to right: a floor or Mod factor printed as
        # "a // b" or "a % b" needs parentheses after another factor (n * ((k + 1) // 2))
        s = " * ".join(
            _pr(f, 3 if k and isinstance(f, (sympy.floor, sympy.ceiling, sympy.Mod)) else 2, names)
            for k, f in enumerate(factors))
        if c != 1:
            s = f"{s} * {_pr(c, 3, names)}"
        return _paren(s, 2, outer)
    if e.is_Pow:
        return _paren(f"{_pr(e.base, 3, names)} ** {_pr(e.exp, 3, names)}", 2, outer)
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if den == 1:
            return _pr(num, outer, names)
        return _paren(f"{_pr(num, 2, names)} // {_pr(den, 3, names)}", 2, outer)
    if isinstance(e, sympy.ceiling):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        return _paren(f"-({_pr(-num, 2, names)} // {_pr(den, 3, names)})", 1, outer)
    if isinstance(e, sympy.Mod):
        return _paren(f"{_pr(e.args[0], 2, names)} % {_pr(e.args[1], 3, names)}", 2, outer)
    if isinstance(e, (sympy.Min, sympy.Max)):
        name = "min" if isinstance(e, sympy.Min) else "max"
        args = sorted(e.args, key=sympy.default_sort_key)
        return f"{name}({', '.join(_pr(a, 0, names) for a in args)})"
    if names:      # a form the printer does not know: substitute the names, then print it
        e = e.xreplace({x: sympy.Symbol(names.get(x.name, x.name), integer=True, nonnegative=True)
                        for x in e.free_symbols})
    return str(e)


def compile_dims(exprs: Sequence[Dim], names: Sequence[str]) -> Callable[..., tuple]:
    """A fast Python function ``f(*values_of_names) -> tuple of ints`` evaluating ``exprs``."""
    body = ", ".join(dim_str(e) for e in exprs)
    src = f"lambda {', '.join(names)}: ({body}{',' if len(exprs) == 1 else ''})"
    return eval(src, {"min": min, "max": max, "__builtins__": {}})  # noqa: S307 (generated)


# ---------------------------------------------------------------------------------------
# Interval bounds
# ---------------------------------------------------------------------------------------

def _mul(a, b):
    return 0 if a == 0 or b == 0 else a * b


def interval(e: Dim, bounds: dict) -> tuple:
    """Lower and upper bound of ``e`` given ``bounds[symbol] = (lo, hi)`` (hi may be inf)."""
    if isinstance(e, int):
        return (e, e)
    if e.is_Integer:
        return (int(e), int(e))
    if e.is_Rational:
        v = Fraction(int(e.p), int(e.q))
        return (v, v)
    if e.is_Symbol:
        return bounds.get(e, DEFAULT_BOUNDS)
    if e.is_Add:
        lo = hi = 0
        for t in e.args:
            a, b = interval(t, bounds)
            lo, hi = lo + a, hi + b
        return (lo, hi)
    if e.is_Mul:
        lo = hi = 1
        for t in e.args:
            a, b = interval(t, bounds)
            cands = [_mul(lo, a), _mul(lo, b), _mul(hi, a), _mul(hi, b)]
            lo, hi = min(cands), max(cands)
        return (lo, hi)
    if e.is_Pow and e.exp.is_Integer:
        a, b = interval(e.base, bounds)
        k = int(e.exp)
        if a >= 0 and k >= 0:
            return (a ** k, b ** k)
        if a > 0 and k < 0:
            return (Fraction(1) / b ** -k if b != INF else 0, Fraction(1) / a ** -k)
        return (-INF, INF)
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        a, b = interval(e.args[0], bounds)
        f = math.floor if isinstance(e, sympy.floor) else math.ceil
        return (f(a) if a != -INF else a, f(b) if b != INF else b)
    if isinstance(e, sympy.Mod):
        a, b = interval(e.args[0], bounds)
        c_lo, c_hi = interval(e.args[1], bounds)
        if c_lo > 0:
            hi = c_hi - 1
            if a >= 0:
                hi = min(hi, b)
            return (0, hi)
        return (-INF, INF)
    if isinstance(e, (sympy.Min, sympy.Max)):
        ivs = [interval(a, bounds) for a in e.args]
        pick = min if isinstance(e, sympy.Min) else max
        return (pick(i[0] for i in ivs), pick(i[1] for i in ivs))
    return (-INF, INF)


def _nonneg_by_shift(d: sympy.Expr, bounds: dict) -> bool:
    """Prove ``d >= 0`` for a polynomial: shift each symbol to its lower bound, check coefficients.

    Catches ``n*k - n >= 0`` (with n, k >= 1), which plain intervals miss.
    """
    syms = sorted(d.free_symbols, key=lambda s: s.name)
    if not syms or not d.is_polynomial(*syms):
        return False
    shift = {}
    for s in syms:
        lo = bounds.get(s, DEFAULT_BOUNDS)[0]
        if lo == -INF:
            return False
        shift[s] = s + int(lo)
    poly = sympy.Poly(sympy.expand(d.xreplace(shift)), *syms)
    return all(c >= 0 for c in poly.coeffs())


# ---------------------------------------------------------------------------------------
# The environment that decides relations
# ---------------------------------------------------------------------------------------

_OPS = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
_MISSING = object()
_NEGATE = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


class Guard:
    """A relation ``lhs op rhs`` over input dims that a cache entry was traced under."""
    __slots__ = ("op", "lhs", "rhs")

    def __init__(self, op: str, lhs: Dim, rhs: Dim):
        self.op, self.lhs, self.rhs = op, normalize(lhs), normalize(rhs)

    def __str__(self) -> str:
        return f"{dim_str(self.lhs)} {self.op} {dim_str(self.rhs)}"

    __repr__ = __str__


class ShapeEnv:
    """Bounds, concrete values (automatic mode), guards and substitutions of one trace."""

    def __init__(self, mode: str = "explicit", bounds: dict | None = None):
        assert mode in ("explicit", "auto")
        self.mode = mode
        self.bounds: dict = dict(bounds or {})
        self.declared: dict = dict(self.bounds)     # before guards tightened them
        self.values: dict = {}              # symbol -> int, for automatic symbols
        self.guards: list[Guard] = []
        self.subst: dict = {}               # symbol -> Dim, from automatic equalities
        self.data_dependent: set = set()    # symbols bound only at run time
        self.zero_mods: set = set()         # Mod(a, c) known to be 0 (proved or guarded)
        self._decided: dict = {}
        self._exact: set = set()
        self._exact_for: int | None = None    # len(zero_mods) that _exact was built from
        self._fresh = 0
        self._assumed: dict = {}            # (op, a, b) -> True, see assume()

    # -- symbols -------------------------------------------------------------------------
    def declare(self, sym: sympy.Symbol, lo=1, hi=INF, value: int | None = None) -> None:
        old = self.bounds.get(sym)
        if old is not None and old != (lo, hi):
            raise ValueError(f"dim {sym.name} declared with two different bounds: "
                             f"{bounds_str(old)} and {bounds_str((lo, hi))}")
        self.bounds[sym] = (lo, hi)
        self.declared[sym] = (lo, hi)
        if value is not None:
            self.values[sym] = value
        self._decided.clear()

    def fresh(self, prefix: str) -> sympy.Symbol:
        """A new data-dependent dim (bound when the program runs), >= 0."""
        while True:
            name = f"{prefix}{self._fresh}"
            self._fresh += 1
            s = symbol(name)
            if s not in self.bounds:
                break
        self.declare(s, 0, INF)
        self.data_dependent.add(s)
        return s

    def canon(self, d: Dim) -> Dim:
        if isinstance(d, int) or not self.subst:
            return d
        if d.free_symbols & self.subst.keys():
            return normalize(d.xreplace(self.subst))
        return d

    # -- deciding ------------------------------------------------------------------------
    def try_prove(self, op: str, a: Dim, b: Dim) -> bool | None:
        """True/False when algebra and bounds settle ``a op b``; None when they cannot."""
        if isinstance(a, int) and isinstance(b, int):
            return _OPS[op](a, b)
        key = (op, a, b)
        if key in self._assumed:
            return True
        r = self._decided.get(key, _MISSING)
        if r is not _MISSING:
            return r
        r = self._prove(op, a, b)
        self._decided[key] = r
        return r

    def prove(self, op: str, a: Dim, b: Dim) -> bool | None:
        """``try_prove``, then SymPy as the prover of last resort where the fast path cannot
        decide (it relaxes each floor to a bounded remainder, which can lose what ties two
        floors together).  For the decisions a trace must make (``decide``,
        ``require_eq``) where a None is an error: explicit shapes, or dims automatic mode
        cannot guard (in automatic mode a guard settles the rest, at no SymPy cost).
        Passes that only look for an optimization call ``try_prove``: SymPy on every
        undecidable pair cost seconds."""
        r = self.try_prove(op, a, b)
        if r is not None or isinstance(a, int) and isinstance(b, int):
            return r
        if self.mode == "auto" and self.can_guard(a, b):
            return None              # a guard decides it: cheaper than SymPy, and as sound
        key = ("sympy", op, a, b)
        r = self._decided.get(key, _MISSING)
        if r is _MISSING:
            r = self._decided[key] = self._prove_sympy(op, a, b)
        return r

    def assume(self, guards: Sequence["Guard"]) -> None:
        """Take ``guards`` (a traced function's) as known: a pass that binds primitives anew
        proves again what the trace proved under them (``min(3, n) == 3`` guarded)."""
        mirror = {"==": "==", ">=": "<=", "<=": ">=", ">": "<", "<": ">", "!=": "!="}
        for g in guards:
            self._assumed[(g.op, g.lhs, g.rhs)] = True
            self._assumed[(mirror[g.op], g.rhs, g.lhs)] = True

    def _prove(self, op: str, a: Dim, b: Dim) -> bool | None:
        if op in ("<", "<=", "!="):
            if op == "!=":
                r = self._prove("==", a, b)
                return None if r is None else not r
            return self._prove(">" if op == "<" else ">=", b, a)
        try:
            # the fast path: dim polynomials decide nearly everything without SymPy
            d = dimpoly.from_sympy(a) - dimpoly.from_sympy(b)
        except dimpoly.Unsupported:
            return self._prove_sympy(op, a, b)
        if op == ">":
            d, op = d - 1, ">="
        return dimpoly.decide(op, d, self._bound_of_name(), self._exact_floors())

    def _bound_of_name(self) -> Callable[[str], tuple]:
        by_name = {s.name: b for s, b in self.bounds.items()}
        return lambda name: by_name.get(name, DEFAULT_BOUNDS)

    def _exact_floors(self) -> set:
        """The floor atoms that ``zero_mods`` make exact (``n // 4 == n / 4``)."""
        if self._exact_for != len(self.zero_mods):
            out = set()
            for m in self.zero_mods:
                try:
                    f = dimpoly.exact_floor(dimpoly.from_sympy(m.args[0]), dimpoly.from_sympy(m.args[1]))
                except dimpoly.Unsupported:
                    continue
                if f is not None:
                    out.add(f)
            self._exact, self._exact_for = out, len(self.zero_mods)
        return self._exact

    def _prove_sympy(self, op: str, a: Dim, b: Dim) -> bool | None:
        """The prover of last resort, for dims outside what dim polynomials express."""
        d = normalize(sympy.expand(sympy.sympify(a) - b))
        if op == ">":
            d, op = normalize(d - 1), ">="
        if isinstance(d, int):
            return d == 0 if op == "==" else d >= 0
        if d.has(sympy.floor):
            # bounds of the floors themselves first: n // 2 - 1 >= 0 for n >= 2, which the
            # rewrite below loses (it bounds n / 2 and n % 2 apart)
            r = self._by_bounds(op, d)
            if r is not None:
                return r
            d = self._without_floors(d)
            if isinstance(d, int):
                return d == 0 if op == "==" else d >= 0
        return self._by_bounds(op, d)

    def _by_bounds(self, op: str, d: Dim) -> bool | None:
        """Decide ``d == 0`` or ``d >= 0`` from the bounds of the dims in ``d``."""
        lo, hi = interval(d, self.bounds)
        return dimpoly.sign_by_bounds(op, lo, hi, lambda: _nonneg_by_shift(d, self.bounds),
                                      lambda: _nonneg_by_shift(normalize(-d - 1), self.bounds))

    def _without_floors(self, d: sympy.Expr) -> Dim:
        """Rewrite ``a // c`` as ``(a - a % c) / c`` and drop the ``a % c`` known to be 0,
        so that ``(a // c) * c == a`` is provable once ``c`` divides ``a``."""
        def unfloor(e):
            num, den = sympy.fraction(sympy.together(e.args[0]))
            if not den.is_Integer:
                return e
            m = sympy.Mod(num, den)
            return (num - (0 if m in self.zero_mods else m)) / den
        return normalize(sympy.expand(d.replace(lambda e: isinstance(e, sympy.floor), unfloor)))

    def same_shape(self, a: Sequence[Dim], b: Sequence[Dim]) -> bool:
        """Equal rank and every pair of dims provably equal."""
        return len(a) == len(b) and all(self.try_prove("==", x, y) is True for x, y in zip(a, b))

    def decide(self, op: str, a: Dim, b: Dim, what: str = "comparison") -> bool:
        """Decide ``a op b``: by proof, or in automatic mode by a guard; else raise."""
        a, b = self.canon(a), self.canon(b)
        r = self.prove(op, a, b)
        if r is not None:
            return r
        v = self._evaluate_for_guard(op, a, b, what)
        self._record(op if v else _NEGATE[op], a, b)
        return v

    def require_eq(self, a: Dim, b: Dim, what: str) -> Dim:
        """Shape rules call this where an op needs two dims equal; returns the common dim."""
        a, b = self.canon(a), self.canon(b)
        r = self.prove("==", a, b)
        if r is True:
            return a
        if r is False:
            raise ShapeError(f"{what}: {dim_str(a)} != {dim_str(b)}")
        if not self.can_guard(a, b):
            raise InconclusiveDimensionError(self._inconclusive_msg("==", a, b, what))
        va, vb = self.evaluate(a), self.evaluate(b)
        if va != vb:
            raise ShapeError(f"{what}: {dim_str(a)} != {dim_str(b)} "
                             f"(here {dim_str(a)}={va}, {dim_str(b)}={vb})")
        self._record("==", a, b)
        return self.canon(a)

    def divides(self, a: Dim, c: Dim, what: str) -> bool:
        """Decide whether ``c`` divides ``a``."""
        m = mod(self.canon(a), c)
        r = self.decide("==", m, 0, what)
        if r and not isinstance(m, int):
            self.zero_mods.add(m)
            self._decided.clear()
        return r

    def concrete(self, d: Dim, what: str) -> int:
        """The concrete value of ``d``: specializes an automatic dim (with a guard)."""
        d = self.canon(d)
        if isinstance(d, int):
            return d
        if self.mode != "auto" or not self.can_guard(d, 0):
            why = ("it depends on data (bound at run time)"
                   if free_symbols(d) & self.data_dependent else "the dims are declared symbolic")
            raise InconclusiveDimensionError(
                f"{what}: needs the concrete value of {dim_str(d)}, but {why}. Fix: keep the "
                f"computation symbolic (use relaxjax.numpy on the dim instead of int()/math/numpy), "
                f"or make the argument static (static_argnums), or use automatic shapes.")
        v = self.evaluate(d)
        self._record("==", d, v)
        return v

    # -- automatic-mode helpers ----------------------------------------------------------
    def can_guard(self, a: Dim, b: Dim) -> bool:
        """Automatic mode knows the values of every symbol in ``a`` and ``b``: a guard can
        decide a relation between them (``decide``, ``require_eq``)."""
        return self.mode == "auto" and all(s in self.values for s in free_symbols(a) | free_symbols(b))

    def evaluate(self, d: Dim) -> int:
        d = self.canon(d)
        if isinstance(d, int):
            return d
        return int(d.xreplace({s: sympy.Integer(v) for s, v in self.values.items()}))

    def _evaluate_for_guard(self, op, a, b, what) -> bool:
        if not self.can_guard(a, b):
            raise InconclusiveDimensionError(self._inconclusive_msg(op, a, b, what))
        return _OPS[op](self.evaluate(a), self.evaluate(b))

    def _record(self, op: str, a: Dim, b: Dim) -> None:
        self.guards.append(Guard(op, a, b))
        self._decided.clear()
        if op == "==":
            if isinstance(a, sympy.Symbol) and isinstance(b, (sympy.Symbol, int)):
                self._equate_symbol(a, b)    # the common guard: no SymPy arithmetic
            elif isinstance(b, sympy.Symbol) and isinstance(a, int):
                self._equate_symbol(b, a)
            else:
                self._substitute(normalize(sympy.expand(sympy.sympify(a) - b)))
        elif op in (">=", ">", "<=", "<"):
            self._tighten(op, a, b)

    def _tighten(self, op: str, a: Dim, b: Dim) -> None:
        """A guarded inequality on one dim (``n - 2 >= 0``) becomes its bound, so later
        proofs know it (``max(0, n - 2)`` is then ``n - 2``); the entry's binder checks
        bounds like guards."""
        d = normalize(sympy.expand(sympy.sympify(a) - b) if op in (">=", ">") else
                      sympy.expand(sympy.sympify(b) - a))
        if op in (">", "<"):
            d = normalize(d - 1)                               # d >= 0 from here
        if isinstance(d, int) or len(d.free_symbols) != 1:
            return
        (sym,) = d.free_symbols
        if not d.is_polynomial(sym) or sympy.degree(d, sym) != 1 or sym not in self.bounds:
            return
        coeff, rest = d.coeff(sym, 1), normalize(d.coeff(sym, 0))
        if coeff not in (1, -1) or not isinstance(rest, int):
            return
        lo, hi = self.bounds[sym]
        if coeff == 1:
            lo = max(lo, -rest)
        else:
            hi = min(hi, rest)
        self.bounds[sym] = (lo, hi)

    def _equate_symbol(self, s, other) -> None:
        """``_substitute(s - other)`` for a symbol ``s`` and a symbol or int ``other``."""
        order = {x: i for i, x in enumerate(self.values)}
        if isinstance(other, sympy.Symbol) and other in order and \
                other not in self.data_dependent and \
                (s not in order or s in self.data_dependent or order[other] > order[s]):
            s, other = other, s                                # eliminate the newer symbol
        if s in order and s not in self.data_dependent:
            self._eliminate(s, other)

    def _substitute(self, d: Dim) -> None:
        """After proving ``d == 0``, eliminate its newest symbol of coefficient +-1."""
        if isinstance(d, int):
            return
        order = {s: i for i, s in enumerate(self.values)}
        cands = [s for s in d.free_symbols if s in order and s not in self.data_dependent]
        for s in sorted(cands, key=lambda s: -order[s]):
            if not d.is_polynomial(s) or sympy.degree(d, s) != 1:
                continue
            coeff = d.coeff(s, 1)
            if coeff not in (1, -1):
                continue
            self._eliminate(s, normalize(sympy.expand(-(d - coeff * s) / coeff)))
            return

    def _eliminate(self, s, sol: Dim) -> None:
        self.subst = {k: normalize(v.xreplace({s: sol})) if is_symbolic(v) else v
                      for k, v in self.subst.items()}
        self.subst[s] = sol

    def _inconclusive_msg(self, op, a, b, what) -> str:
        dd = (free_symbols(a) | free_symbols(b)) & self.data_dependent
        if dd:
            fix = (f"{', '.join(sorted(s.name for s in dd))} is only known at run time; "
                   f"assert a shape with rj.match_cast(x, shape) first")
        else:
            fix = ("declare the dims equal (use one dim name for both), add bounds with "
                   "rj.dim(name, min=..., max=...), or make the argument static (static_argnums)")
        bnds = "; ".join(f"{s.name} in {bounds_str(self.bounds.get(s, DEFAULT_BOUNDS))}"
                         for s in sorted(free_symbols(a) | free_symbols(b), key=lambda s: s.name))
        return (f"{what}: cannot decide whether {dim_str(a)} {op} {dim_str(b)} "
                f"(known: {bnds or 'nothing'}). Fix: {fix}.")

    def final_guards(self) -> list[Guard]:
        """Guards rewritten with the final substitution, without the trivially true ones."""
        out, seen = [], set()
        for g in self.guards:
            lhs, rhs = self.canon(g.lhs), self.canon(g.rhs)
            # proved by the declared bounds alone (a guard that tightened a bound stays: it
            # is what the trace assumed, and prints as such)
            if ShapeEnv("explicit", self.declared).try_prove(g.op, lhs, rhs) is True:
                continue
            key = (g.op, lhs, rhs)
            if key not in seen:
                seen.add(key)
                out.append(Guard(g.op, lhs, rhs))
        return out


def bounds_str(b) -> str:
    lo, hi = b
    return f"[{lo}, {'inf' if hi == INF else hi}]"


# ---------------------------------------------------------------------------------------
# The current environment (set while tracing)
# ---------------------------------------------------------------------------------------

_state = threading.local()


def current_env() -> ShapeEnv | None:
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None


class use_env:
    def __init__(self, env: ShapeEnv):
        self.env = env

    def __enter__(self):
        if not hasattr(_state, "stack"):
            _state.stack = []
        _state.stack.append(self.env)
        return self.env

    def __exit__(self, *exc):
        _state.stack.pop()


# ---------------------------------------------------------------------------------------
# The user-facing dim
# ---------------------------------------------------------------------------------------

class SymbolicDim:
    """A symbolic dimension: ``n``, ``n * 4``, ``(n + 7) // 8 * 8`` ...

    Arithmetic with ints and other dims gives dims.  Comparisons are decided by proof, by a
    guard (automatic mode) or raise :class:`InconclusiveDimensionError`.
    """
    __slots__ = ("expr", "bounds")
    # NumPy defers to our reflected operators until relaxjax.numpy installs its ufunc dispatch
    __array_ufunc__ = None

    def __init__(self, expr: sympy.Expr, bounds: dict | None = None):
        self.expr = expr
        self.bounds = bounds or {}

    # -- arithmetic ----------------------------------------------------------------------
    def _arith(self, other, fn, reflected=False):
        if isinstance(other, SymbolicDim):
            o, bounds = other.expr, {**self.bounds, **other.bounds}
        elif isinstance(other, (int, np.integer)) and not isinstance(other, (bool, np.bool_)):
            o, bounds = int(other), self.bounds           # np.int64(2) * n is a dim too
        else:
            return _as_value_op(self, other, fn.__name__, reflected)
        r = fn(o, self.expr) if reflected else fn(self.expr, o)
        strong = isinstance(self, NumpyIntDim) or isinstance(other, (NumpyIntDim, np.integer))
        return (numpy_int_dim if strong else wrap_dim)(normalize(r), bounds)

    def __add__(self, o): return self._arith(o, _add)
    def __radd__(self, o): return self._arith(o, _add, True)
    def __sub__(self, o): return self._arith(o, _sub)
    def __rsub__(self, o): return self._arith(o, _sub, True)
    def __mul__(self, o): return self._arith(o, _mul_)
    def __rmul__(self, o): return self._arith(o, _mul_, True)
    def __floordiv__(self, o): return self._arith(o, floordiv)
    def __rfloordiv__(self, o): return self._arith(o, floordiv, True)
    def __mod__(self, o): return self._arith(o, mod)
    def __rmod__(self, o): return self._arith(o, mod, True)
    def __truediv__(self, o): return _as_value_op(self, o, "truediv", False)
    def __rtruediv__(self, o): return _as_value_op(self, o, "truediv", True)
    def __pow__(self, o): return _as_value_op(self, o, "pow", False)
    def __rpow__(self, o): return _as_value_op(self, o, "pow", True)
    def __neg__(self):
        return (numpy_int_dim if isinstance(self, NumpyIntDim) else wrap_dim)(normalize(-self.expr), self.bounds)
    def __pos__(self): return self

    def __abs__(self):
        """``abs(d)``: ``d`` where its bounds say it is never negative (a dim's size), ``-d``
        where never positive."""
        lo, hi = interval(self.expr, self.bounds)
        if lo >= 0:
            return self
        if hi <= 0:
            return -self
        raise InconclusiveDimensionError(
            f"abs({dim_str(self.expr)}): the sign of the dim expression is not known from its "
            f"bounds ({lo} to {hi}); compare it first (an if on it adds a guard)")

    # -- comparisons ---------------------------------------------------------------------
    def _cmp(self, other, op):
        if isinstance(other, SymbolicDim):
            o = other.expr
        elif isinstance(other, int) and not isinstance(other, bool):
            o = other
        else:
            return NotImplemented
        env = current_env()
        if env is None:
            if op in ("==", "!="):   # outside a trace: structural, so dims work as dict keys
                same = normalize(sympy.expand(self.expr - o)) == 0
                return same if op == "==" else not same
            bounds = {**self.bounds, **getattr(other, "bounds", {})}
            env = ShapeEnv("explicit", bounds)
        else:
            for s, b in {**self.bounds, **getattr(other, "bounds", {})}.items():
                env.bounds.setdefault(s, b)
        return env.decide(op, self.expr, o, f"comparison {self} {op} {dim_str(o)}")

    def __eq__(self, o): return self._cmp(o, "==")
    def __ne__(self, o): return self._cmp(o, "!=")
    def __lt__(self, o): return self._cmp(o, "<")
    def __le__(self, o): return self._cmp(o, "<=")
    def __gt__(self, o): return self._cmp(o, ">")
    def __ge__(self, o): return self._cmp(o, ">=")

    def __hash__(self):
        return hash(self.expr)

    def __bool__(self):
        return bool(self._cmp(0, "!="))

    # -- concrete values -----------------------------------------------------------------
    def _concrete(self, what: str) -> int:
        env = current_env()
        if env is None:
            raise InconclusiveDimensionError(
                f"{what}: {self} is a symbolic dim and has no concrete value outside a trace")
        return env.concrete(self.expr, what)

    def __index__(self): return self._concrete(f"int({self})")
    def __int__(self): return self._concrete(f"int({self})")
    def __float__(self): return float(self._concrete(f"float({self})"))

    def __array__(self, dtype=None, copy=None):
        import numpy as np
        return np.asarray(self._concrete(f"numpy conversion of {self}"), dtype=dtype)

    def __str__(self):
        return dim_str(self.expr)

    def __repr__(self):
        return f"SymbolicDim({dim_str(self.expr)})"


def _add(a, b): return sympy.expand(a + b)
def _sub(a, b): return sympy.expand(a - b)
def _mul_(a, b): return sympy.expand(a * b)


def wrap_dim(d: Dim, bounds: dict | None = None):
    """Internal dim -> what users see (int or SymbolicDim)."""
    return d if isinstance(d, int) else SymbolicDim(d, bounds)


class NumpyIntDim(SymbolicDim):
    """A dim that NumPy would hold as an ``np.int64`` scalar: the result of a NumPy function
    (``np.abs(n)``, ``np.add(n, 1)``) or of arithmetic with one.  It is still a dim (a shape
    may use it), but as an operand it promotes like int64, not like a Python int: ``x //
    (np.abs(n) + 1)`` on int32 ``x`` is int64, as in NumPy."""
    __slots__ = ()


def numpy_int_dim(d: Dim, bounds: dict | None = None):
    """Internal dim -> a :class:`NumpyIntDim` (or an ``np.int64`` when it is a number)."""
    return np.int64(d) if isinstance(d, int) else NumpyIntDim(d, bounds)


def as_dim(d: Any, what: str = "dimension") -> Dim:
    """User value (int, SymbolicDim, numpy integer) -> internal dim."""
    if isinstance(d, SymbolicDim):
        env = current_env()
        if env is not None:
            for s, b in d.bounds.items():
                env.bounds.setdefault(s, b)
            return env.canon(d.expr)
        return d.expr
    if isinstance(d, sympy.Basic):
        return normalize(d)
    if isinstance(d, bool):
        raise TypeError(f"{what} must be an integer or a dim, got a bool")
    try:
        return operator.index(d)
    except TypeError:
        raise TypeError(f"{what} must be an integer or a symbolic dim, got {type(d).__name__}") from None


# Non-integer arithmetic on a dim turns it into a traced scalar (as NumPy would turn the
# Python int into a float).  The hook is installed by relaxjax.numpy, which knows how.
_value_hook: list = []


def set_value_op_hook(fn) -> None:
    """``fn(dim, other, opname, reflected)``: the value (or NotImplemented) of arithmetic
    between a symbolic dim and something that is not an integer dim."""
    _value_hook[:] = [fn]


def _as_value_op(dim: SymbolicDim, other, opname: str, reflected: bool):
    if not _value_hook:
        return NotImplemented
    return _value_hook[0](dim, other, opname, reflected)


def dims(names: str | Sequence[str], *, min: int = 1, max: float = INF) -> tuple[SymbolicDim, ...]:
    """Several symbolic dims at once: ``n, k = rj.dims("n k")``."""
    if isinstance(names, str):
        names = names.replace(",", " ").split()
    return tuple(dim(n, min=min, max=max) for n in names)


def dim(name: str, *, min: int = 1, max: float = INF) -> SymbolicDim:
    """One symbolic dim, with optional bounds (``min`` defaults to 1)."""
    if not isinstance(min, int) or min < 0:
        raise ValueError(f"dim {name}: min must be a non-negative int, got {min!r}")
    if max != INF and (not isinstance(max, int) or max < min):
        raise ValueError(f"dim {name}: max must be an int >= min ({min}), got {max!r}")
    s = symbol(name)
    return SymbolicDim(s, {s: (min, max)})


_EVAL_CODE: dict = {}


def eval_dim(d: Dim, values: dict) -> int:
    """The value of dim expression ``d`` given ``values[name] = int`` (compiled once per
    expression)."""
    if isinstance(d, (int, np.integer)):
        return int(d)
    code = _EVAL_CODE.get(d)
    if code is None:
        code = _EVAL_CODE[d] = compile(dim_str(d), "<dim>", "eval")
    return int(eval(code, {"min": min, "max": max, "__builtins__": {}}, values))  # noqa: S307
