"""Dim polynomials: a cheap canonical form for integer expressions over dims and loop
variables, and the fast decision procedure built on it.

SymPy's general simplifier costs tens of milliseconds to seconds on the index expressions a
reshape produces (``(i * n + j) // n``); the relations the compiler asks about are nearly
always decided by much less.  A :class:`Poly` is a polynomial with integer (or rational)
coefficients whose *atoms* are variables (by name), floor divisions ``floor(p / q)`` and
``min``/``max`` of polynomials.  Each floor is kept reduced:

* ``floor((q * a + r) / q) = a + floor(r / q)`` for an integer polynomial ``a`` (division of
  ``p`` by ``q`` term by term, in a fixed monomial order);
* a constant divisor ``c`` leaves every remainder coefficient in ``[0, c)`` and shares no
  common factor with the remainder's coefficients;
* ``floor(floor(x / a) / c) = floor(x / (a * c))`` for a constant ``c > 0``;
* ``p % q`` is ``p - q * floor(p / q)``, so remainders and quotients meet in one atom.

Equal forms mean equal values wherever the expressions are defined (no division by zero),
so comparing forms is an exact, one-sided equality test: different forms decide nothing.
:func:`decide` adds interval bounds of the atoms and a shift to lower bounds for products of
dims.  What the form cannot express (a non-integer power, a float) raises
:class:`Unsupported`, and the caller falls back to SymPy.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable, Iterable

INF = math.inf


class Unsupported(Exception):
    """The expression is outside what dim polynomials represent."""


# ---------------------------------------------------------------------------------------
# Polynomials
# ---------------------------------------------------------------------------------------

def _num(c):
    """A coefficient as an int when it is one (Fractions only where needed)."""
    return c.numerator if isinstance(c, Fraction) and c.denominator == 1 else c


class Poly:
    """``{monomial: coefficient}`` with nonzero coefficients; a monomial is a frozenset of
    ``(atom, power)`` pairs, ``frozenset()`` for the constant term.  Immutable."""
    __slots__ = ("terms", "_hash", "_key")

    def __init__(self, terms: dict):
        self.terms = terms
        self._hash = None
        self._key = None

    def __eq__(self, o) -> bool:
        return isinstance(o, Poly) and self.terms == o.terms

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self.terms.items()))
        return self._hash

    def __repr__(self) -> str:
        return f"Poly({self.key()})"

    def key(self) -> tuple:
        """A total order on forms (for the monomial order of division)."""
        if self._key is None:
            self._key = tuple(sorted((_mono_key(m), c) for m, c in self.terms.items()))
        return self._key

    # -- queries -------------------------------------------------------------------------
    def constant(self):
        """The value when the polynomial is a constant, else None."""
        if not self.terms:
            return 0
        if len(self.terms) == 1:
            return self.terms.get(_ONE)
        return None

    def is_integral(self) -> bool:
        return all(not isinstance(c, Fraction) for c in self.terms.values())

    def atoms(self) -> set:
        return {a for m in self.terms for a, _ in m}

    # -- arithmetic ----------------------------------------------------------------------
    def __add__(self, o: "Poly | int") -> "Poly":
        if not isinstance(o, Poly):
            o = const(o)
        t = dict(self.terms)
        for m, c in o.terms.items():
            v = t.get(m, 0) + c
            if v:
                t[m] = _num(v)
            else:
                t.pop(m, None)
        return Poly(t)

    def __neg__(self) -> "Poly":
        return Poly({m: -c for m, c in self.terms.items()})

    def __sub__(self, o: "Poly | int") -> "Poly":
        return self + (-o)

    def __rsub__(self, o: int) -> "Poly":
        return (-self) + o

    def __mul__(self, o: "Poly | int") -> "Poly":
        if not isinstance(o, Poly):
            return self.scale(o)
        t: dict = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in o.terms.items():
                m = _mono_mul(m1, m2)
                v = t.get(m, 0) + c1 * c2
                if v:
                    t[m] = _num(v)
                else:
                    t.pop(m, None)
        return Poly(t)

    __radd__ = __add__

    def __rmul__(self, o: int) -> "Poly":
        return self.scale(o)

    def scale(self, c) -> "Poly":
        return Poly({m: _num(v * c) for m, v in self.terms.items()}) if c else ZERO

    def __pow__(self, k: int) -> "Poly":
        out = ONE
        for _ in range(k):
            out = out * self
        return out


_ONE = frozenset()


def _mono_mul(a: frozenset, b: frozenset) -> frozenset:
    if not a:
        return b
    if not b:
        return a
    p = dict(a)
    for x, k in b:
        p[x] = p.get(x, 0) + k
    return frozenset(p.items())


def _mono_key(m: frozenset) -> tuple:
    """Graded lexicographic order (atoms with larger keys first): a monomial order, so
    division by a polynomial terminates."""
    return (sum(k for _, k in m), tuple(sorted(((_atom_key(a), k) for a, k in m), reverse=True)))


def _atom_key(a) -> tuple:
    return (0, a) if isinstance(a, str) else a.key()


def const(c) -> Poly:
    c = _num(Fraction(c)) if not isinstance(c, int) else c
    return Poly({_ONE: c}) if c else ZERO


def var(name: str) -> Poly:
    return Poly({frozenset({(name, 1)}): 1})


def atom(a) -> Poly:
    return Poly({frozenset({(a, 1)}): 1})


ZERO = Poly({})
ONE = Poly({_ONE: 1})


# ---------------------------------------------------------------------------------------
# Atoms: floor division, min and max
# ---------------------------------------------------------------------------------------

class Floor:
    """``floor(num / den)``, ``num`` reduced modulo ``den`` (see the module docstring)."""
    __slots__ = ("num", "den", "_hash", "_key")

    def __init__(self, num: Poly, den: Poly):
        self.num, self.den = num, den
        self._hash = hash((num, den))
        self._key = None

    def __eq__(self, o) -> bool:
        return isinstance(o, Floor) and self._hash == o._hash and self.num == o.num and self.den == o.den

    def __hash__(self) -> int:
        return self._hash

    def key(self) -> tuple:
        if self._key is None:
            self._key = (1, self.num.key(), self.den.key())
        return self._key


class MinMax:
    """``min(args)`` or ``max(args)`` (``kind``), an opaque atom bounded by its arguments."""
    __slots__ = ("kind", "args", "_hash", "_key")

    def __init__(self, kind: str, args: frozenset):
        self.kind, self.args = kind, args
        self._hash = hash((kind, args))
        self._key = None

    def __eq__(self, o) -> bool:
        return isinstance(o, MinMax) and self.kind == o.kind and self.args == o.args

    def __hash__(self) -> int:
        return self._hash

    def key(self) -> tuple:
        if self._key is None:
            self._key = (2, self.kind, tuple(sorted(a.key() for a in self.args)))
        return self._key


def minmax(kind: str, args: Iterable[Poly]) -> Poly:
    args = frozenset(args)
    if len(args) == 1:
        return next(iter(args))
    consts = [a.constant() for a in args]
    if all(c is not None for c in consts):
        return const((min if kind == "min" else max)(consts))
    return atom(MinMax(kind, args))


def _lcm_den(p: Poly) -> int:
    d = 1
    for c in p.terms.values():
        if isinstance(c, Fraction):
            d = d * c.denominator // math.gcd(d, c.denominator)
    return d


def floordiv(p: Poly, q: Poly) -> Poly:
    """``floor(p / q)`` in reduced form (``q`` nonzero where it is evaluated)."""
    c = q.constant()
    if c == 0:
        raise Unsupported("division by zero")
    if c is None:
        d = max(_lcm_den(p), _lcm_den(q))
        if d > 1:
            p, q = p.scale(d), q.scale(d)
        return _floordiv_poly(p, q)
    quo, r, c = _reduce(p, c)
    if r.constant() is not None:         # 0 <= r < c
        return quo
    f = _nested(r)
    if f is not None:
        # floor((floor(s / a) + rest) / c) = floor((s + a * rest) / (a * c)) for c > 0
        rest = r - atom(f)
        return quo + floordiv(f.num + f.den * rest, f.den.scale(c))
    return quo + atom(Floor(r, const(c)))


def _reduce(p: Poly, c) -> tuple:
    """``floor(p / c) = quo + floor(r / c')``, every coefficient of ``r`` in ``[0, c')`` and
    ``c' > 0`` an integer sharing no factor with all of ``r``'s nonconstant coefficients:
    (quo, r, c')."""
    if c < 0:
        p, c = -p, -c
    d = _lcm_den(p) * (c.denominator if isinstance(c, Fraction) else 1)
    if d > 1:                            # floor(p / c) = floor(d * p / (d * c))
        p, c = p.scale(d), _num(c * d)
    quo, rem = {}, {}
    for m, a in p.terms.items():
        qa, ra = divmod(a, c)
        if qa:
            quo[m] = qa
        if ra:
            rem[m] = ra
    # floor((g * x + k) / (g * c')) = floor((x + k // g) / c') for an integer x: no
    # multiple of c' lies between x + k // g and x + k / g (floor((2n + 1) / 6) = n // 3)
    g = c
    for m, a in rem.items():
        if m:
            g = math.gcd(g, a)
    if g > 1:
        rem = {m: a // g for m, a in rem.items() if m or a // g}
        c //= g
    return Poly(quo), Poly(rem), c


def _nested(r: Poly):
    """The floor atom ``f`` when ``r`` is ``f`` plus terms free of ``f`` (else None).  Only
    a constant divisor: merging ``floor(n / m) // 2`` into ``n // (2 * m)`` would lose the
    bounds of the remainder ``floor(n / m) % 2`` that proofs use."""
    found = None
    for m, a in r.terms.items():
        if a == 1 and len(m) == 1:
            (x, k), = m
            if k == 1 and isinstance(x, Floor) and x.den.constant() is not None:
                if found is not None:
                    return None          # two candidates: no canonical choice
                found = x
    if found is None or any(found in dict(m) for m in r.terms if m != frozenset({(found, 1)})):
        return None
    return found


def _floordiv_poly(p: Poly, q: Poly) -> Poly:
    """``floor(p / q)`` for a polynomial ``q``: divide out the integer multiples of ``q``."""
    if not p.terms:
        return ZERO
    if not p.is_integral() or not q.is_integral():
        raise Unsupported("floor division with rational coefficients")
    lm, lc = max(q.terms.items(), key=lambda t: _mono_key(t[0]))
    if lc < 0:                           # floor(p / q) = floor(-p / -q): q leads positive
        p, q, lc = -p, -q, -lc
    lmd = dict(lm)
    quo: dict = {}
    rem = p
    out: dict = {}
    while rem.terms:
        m, a = max(rem.terms.items(), key=lambda t: _mono_key(t[0]))
        md = dict(m)
        if a % lc == 0 and all(md.get(x, 0) >= k for x, k in lmd.items()):
            qm = frozenset((x, k - lmd.get(x, 0)) for x, k in md.items() if k - lmd.get(x, 0))
            t = Poly({qm: a // lc})
            quo[qm] = quo.get(qm, 0) + a // lc
            rem = rem - t * q
        else:
            out[m] = a
            rem = Poly({k: v for k, v in rem.terms.items() if k != m})
    quo_p = Poly({m: c for m, c in quo.items() if c})
    r = Poly(out)
    if not r.terms:
        return quo_p
    return quo_p + atom(Floor(r, q))


def mod(p: Poly, q: Poly) -> Poly:
    """``p % q`` (floor semantics, as Python): ``p - q * floor(p / q)``."""
    return p - q * floordiv(p, q)


# ---------------------------------------------------------------------------------------
# Deciding relations from bounds
# ---------------------------------------------------------------------------------------

Bounds = Callable[[str], tuple]


def _imul(a, b):
    return 0 if a == 0 or b == 0 else a * b


def _ipow(lo, hi, k):
    if lo >= 0 or k % 2:
        return (lo ** k, hi ** k)
    if hi <= 0:
        return (hi ** k, lo ** k)
    return (0, max(-lo, hi) ** k)


def interval(p: Poly, bounds: Bounds, atom_bounds: dict | None = None) -> tuple:
    """Lower and upper bound of ``p``; ``bounds(name)`` bounds a variable, ``atom_bounds``
    overrides the bounds of other atoms."""
    lo = hi = 0
    memo: dict = dict(atom_bounds or {})
    for m, c in p.terms.items():
        a, b = 1, 1
        for x, k in m:
            xl, xh = atom_interval(x, bounds, memo)
            if k != 1:
                xl, xh = _ipow(xl, xh, k)
            cands = [_imul(a, xl), _imul(a, xh), _imul(b, xl), _imul(b, xh)]
            a, b = min(cands), max(cands)
        ca, cb = (_imul(c, a), _imul(c, b)) if c > 0 else (_imul(c, b), _imul(c, a))
        lo, hi = lo + ca, hi + cb
    return lo, hi


def _quotient(a, b):
    """``a / b`` for a bound ``a`` and a positive bound ``b`` (exact for finite ones).  Over
    an infinite ``b`` it is 0: the limit for a finite ``a``, and for an infinite one a value
    the other corners (``a / lo``) already enclose."""
    if b == INF:
        return 0
    if a in (INF, -INF):
        return a
    return Fraction(a) / b


def atom_interval(x, bounds: Bounds, memo: dict) -> tuple:
    r = memo.get(x)
    if r is not None:
        return r
    if isinstance(x, str):
        r = bounds(x)
    elif isinstance(x, Floor):
        nl, nh = _tight(x.num, bounds, memo)
        dl, dh = _tight(x.den, bounds, memo)
        if dl > 0:       # num / den is monotone in each: its extremes are at the corners
            qs = [_quotient(a, b) for a in (nl, nh) for b in (dl, dh)]
            lo, hi = min(qs), max(qs)
            r = (lo if lo == -INF else math.floor(lo), hi if hi == INF else math.floor(hi))
        else:
            r = (-INF, INF)
    elif isinstance(x, MinMax):
        ivs = [_tight(a, bounds, memo) for a in x.args]
        pick = min if x.kind == "min" else max
        r = (pick(i[0] for i in ivs), pick(i[1] for i in ivs))
    else:
        r = (-INF, INF)
    memo[x] = r
    return r


def _tight(p: Poly, bounds: Bounds, memo: dict) -> tuple:
    """The bounds of ``p`` inside another atom: its plain interval, narrowed by the one of
    ``p`` with its floors written through remainders (``n - 2 * (n // 2)`` is in [0, 1],
    which the interval of ``n`` and ``n // 2`` apart cannot see)."""
    lo, hi = interval(p, bounds, memo)
    u = _unfloor(p, frozenset())
    if u is not None:
        ulo, uhi = interval(_rem_bounds(u, bounds, memo), bounds, memo)
        lo, hi = max(lo, ulo), min(hi, uhi)
    return lo, hi


def _nonneg_by_shift(p: Poly, bounds: Bounds, memo: dict) -> bool:
    """``p >= 0`` proved by writing every atom as its lower bound plus a nonnegative
    unknown: a polynomial in those unknowns with nonnegative coefficients is nonnegative
    (``n*k - n >= 0`` for ``n, k >= 1``, which intervals alone miss)."""
    key = ("shift", p)
    hit = memo.get(key)
    if hit is not None:
        return hit
    shifts: dict = {}                 # atom -> its lower bound, where that is not 0
    for x in p.atoms():
        lo = atom_interval(x, bounds, memo)[0]
        if lo == -INF:
            memo[key] = False
            return False
        if lo != 0:                   # an atom from 0 stays itself: nothing to expand
            shifts[x] = lo
    # the expansion has up to 2**(shifted atoms) terms per monomial: past _SHIFT_TERMS the
    # test gives up (undecided) rather than spend seconds on products of many dims
    if sum(2 ** sum(k for x, k in m if x in shifts) for m in p.terms) > _SHIFT_TERMS:
        memo[key] = False
        return False
    total: dict = {}                  # monomial of the unknowns -> coefficient
    for m, c in p.terms.items():
        parts = {(): c}
        for x, k in m:
            lo = shifts.get(x)
            if lo is None:
                parts = {t + ((x, k),): v for t, v in parts.items()}
                continue
            grown: dict = {}
            for t, v in parts.items():          # (y + lo)**k, binomially
                for j in range(k + 1):
                    u = t + ((x, j),) if j else t
                    grown[u] = grown.get(u, 0) + v * math.comb(k, j) * lo ** (k - j)
            parts = grown
        for t, v in parts.items():
            u = frozenset(t)
            total[u] = total.get(u, 0) + v
    r = all(v >= 0 for v in total.values())
    memo[key] = r
    return r


_SHIFT_TERMS = 4096


def _unfloor(p: Poly, exact: set) -> Poly | None:
    """Rewrite each ``floor(r / c)`` (constant ``c``) as ``(r - rem(r, c)) / c``, with the
    remainder a new atom in ``[0, c - 1]``, or 0 when ``exact`` says ``c`` divides ``r``:
    ``(n // 2) * 2 - n`` becomes ``-rem(n, 2)``, decided by its bounds."""
    subs = {}
    for x in p.atoms():
        if isinstance(x, Floor) and x.den.constant() is not None:
            c = x.den.constant()
            r = x.num if x in exact else x.num - atom(Rem(x.num, c))
            subs[x] = r.scale(Fraction(1, c))
    return _substitute(p, subs) if subs else None


def _substitute(p: Poly, subs: dict) -> Poly:
    """``p`` with the atoms ``subs`` names replaced by polynomials."""
    out = ZERO
    for m, c in p.terms.items():
        t = const(c)
        for x, k in m:
            t = t * (subs[x] ** k if x in subs else atom(x) ** k)
        out = out + t
    return out


class Rem:
    """``num mod c`` for a constant ``c`` (only inside :func:`decide`); with ``low``, the
    digit ``(num mod c) // low``."""
    __slots__ = ("num", "c", "low", "_hash")

    def __init__(self, num: Poly, c: int, low: int = 0):
        self.num, self.c, self.low = num, c, low
        self._hash = hash((num, c, low, "rem"))

    def __eq__(self, o) -> bool:
        return isinstance(o, Rem) and (self.c, self.low) == (o.c, o.low) and self.num == o.num

    def __hash__(self) -> int:
        return self._hash

    def key(self) -> tuple:
        return (3, self.num.key(), self.c, self.low)


def _rem_bounds(p: Poly, bounds: Bounds, memo: dict) -> Poly:
    """Bound each remainder atom, after splitting the remainders of one numerator into
    mixed-radix digits: with ``c | c'``, ``r mod c' = r mod c + c * digit``, ``digit`` in
    ``[0, c'/c - 1]``.  That keeps what the reduced form's merge of nested floors dropped
    (``n // 2 - n // 2 // 2 * 2 >= 0``, i.e. ``n mod 4 >= n mod 2``)."""
    by_num: dict = {}
    for x in p.atoms():
        if isinstance(x, Rem):
            by_num.setdefault(x.num, []).append(x)
    subs = {}
    for rems in by_num.values():
        rems.sort(key=lambda x: x.c)
        for small, big in zip(rems, rems[1:]):
            if big.c % small.c == 0:
                digit = Rem(big.num, big.c, small.c)
                memo[digit] = (0, big.c // small.c - 1)
                subs[big] = (subs.get(small) or atom(small)) + atom(digit).scale(small.c)
    for x in p.atoms():
        if isinstance(x, Rem) and x not in subs:
            nl, nh = interval(x.num, bounds, memo)
            memo[x] = (0, min(x.c - 1, nh) if nl >= 0 else x.c - 1)
    for x in subs:
        memo[x] = (0, x.c - 1)
    if not subs:
        return p
    out = _substitute(p, subs)
    for x in out.atoms():
        if isinstance(x, Rem) and x not in memo:
            nl, nh = interval(x.num, bounds, memo)
            memo[x] = (0, min(x.c - 1, nh) if nl >= 0 else x.c - 1)
    return out


def sign_by_bounds(op: str, lo, hi, nonneg: Callable[[], bool],
                   negative: Callable[[], bool]) -> bool | None:
    """``d == 0`` (op ``"=="``) or ``d >= 0`` decided from an interval ``[lo, hi]`` of ``d``,
    then (``">="``) by the shift tests ``nonneg()`` (``d >= 0``) and ``negative()``
    (``-d - 1 >= 0``): the one rule both provers (these forms, SymPy's) apply last."""
    if op == "==":
        return False if (lo > 0 or hi < 0) else None
    if lo >= 0:
        return True
    if hi < 0:
        return False
    if nonneg():
        return True
    if negative():
        return False
    return None


def _by_bounds(op: str, d: Poly, bounds: Bounds, memo: dict) -> bool | None:
    lo, hi = interval(d, bounds, memo)
    return sign_by_bounds(op, lo, hi, lambda: _nonneg_by_shift(d, bounds, memo),
                          lambda: _nonneg_by_shift(-d - ONE, bounds, memo))


def names(p: Poly) -> frozenset:
    """The variables ``p`` depends on, inside its floor and min/max atoms too."""
    r = _NAMES.get(p)
    if r is None:
        out = set()
        for x in p.atoms():
            if isinstance(x, str):
                out.add(x)
            elif isinstance(x, Floor):
                out |= names(x.num) | names(x.den)
            elif isinstance(x, MinMax):
                for a in x.args:
                    out |= names(a)
        r = frozenset(out)
        if len(_NAMES) > _CACHE_LIMIT:
            _NAMES.clear()
        _NAMES[p] = r
    return r


_NAMES: dict = {}
_DECIDED: dict = {}
_MISSING = object()


def decide(op: str, d: Poly, bounds: Bounds, exact: set = frozenset()) -> bool | None:
    """``d == 0`` (op ``"=="``) or ``d >= 0`` (op ``">="``): True or False when the form and
    the bounds settle it, else None.  ``exact``: floor atoms known to divide exactly.
    Memoized on everything the answer depends on: the form, the bounds of its variables and
    the exact floors among its atoms (the same relations recur across traces and passes)."""
    c = d.constant()
    if c is not None:
        return c == 0 if op == "==" else c >= 0
    key = (op, d, tuple(sorted((n, bounds(n)) for n in names(d))),
           frozenset(x for x in exact if x in d.atoms()) if exact else frozenset())
    r = _DECIDED.get(key, _MISSING)
    if r is _MISSING:
        r = _decide(op, d, bounds, exact)
        if len(_DECIDED) > _CACHE_LIMIT:
            _DECIDED.clear()
        _DECIDED[key] = r
    return r


def _decide(op: str, d: Poly, bounds: Bounds, exact: set) -> bool | None:
    memo: dict = {}
    r = _by_bounds(op, d, bounds, memo)
    if r is not None:
        return r
    # a floor its bounds pin to one value is that value (k // 6 for k <= 5), before the
    # rewrite through remainders, which would forget that
    points = {x: atom_interval(x, bounds, memo)[0] for x in d.atoms() if isinstance(x, Floor)}
    points = {x: v for x, v in points.items() if atom_interval(x, bounds, memo)[1] == v}
    if points:
        d = _substitute(d, {x: const(v) for x, v in points.items()})
        c = d.constant()
        if c is not None:
            return c == 0 if op == "==" else c >= 0
    u = _unfloor(d, exact)
    if u is None:
        return None
    c = u.constant()
    if c is not None:
        return c == 0 if op == "==" else c >= 0
    u = _rem_bounds(u, bounds, memo)
    r = _by_bounds(op, u, bounds, memo)
    if r is not None:
        return r
    # d is an integer (dims and floors are), though u's coefficients may be fractions: a
    # lower bound above -1 proves d >= 0, a range inside (-1, 1) proves d == 0
    lo, hi = interval(u, bounds, memo)
    if lo > -1 and (op == ">=" or hi < 1):
        return True
    return None


def exact_floor(p: Poly, c: Poly) -> Floor | None:
    """The floor atom that is exact (``floor(r / c) == r / c``) when ``c`` divides ``p``:
    with ``p = c * q + g * r`` and ``c = g * c'``, ``c | p`` iff ``c' | r``.  None when the
    reduced form merged a nested floor (its exactness does not follow) or has no atom."""
    k = c.constant()
    if k is None or k == 0:
        return None
    _, r, k2 = _reduce(p, k)
    if r.constant() is not None or _nested(r) is not None:
        return None
    if (p.terms.get(_ONE, 0) % k) % (k // k2):
        return None              # c never divides p: the fact is void, claim nothing from it
    return Floor(r, const(k2))


# ---------------------------------------------------------------------------------------
# From SymPy dims
# ---------------------------------------------------------------------------------------

_FROM_SYMPY: dict = {}
_CACHE_LIMIT = 200_000


def from_sympy(e) -> Poly:
    """The form of a dim (an int or a SymPy expression); memoized per expression."""
    if isinstance(e, int):
        return const(e)
    r = _FROM_SYMPY.get(e)
    if r is None:
        try:
            num, den = _frac(e)
            r = num if den is ONE else Unsupported(f"{e} is not a polynomial")
        except Unsupported as exc:
            r = exc
        if len(_FROM_SYMPY) > _CACHE_LIMIT:
            _FROM_SYMPY.clear()
        _FROM_SYMPY[e] = r
    if isinstance(r, Unsupported):
        raise r
    return r


def _ratio(num: Poly, den: Poly) -> tuple:
    """``num / den`` with a constant denominator folded into the coefficients."""
    c = den.constant()
    if c is None:
        return num, den
    if c == 0:
        raise Unsupported("division by zero")
    return (num if c == 1 else num.scale(Fraction(1, 1) / c)), ONE


def _frac(e) -> tuple:
    """``e`` as ``(numerator, denominator)`` polynomials (the denominator ``ONE`` unless it
    is symbolic)."""
    import sympy
    if e.is_Integer:
        return const(int(e)), ONE
    if e.is_Rational:
        return const(Fraction(int(e.p), int(e.q))), ONE
    if e.is_Symbol:
        return var(e.name), ONE
    if e.is_Add:
        n, d = ZERO, ONE
        for t in e.args:
            tn, td = _frac(t)
            n, d = (n + tn, d) if td == d else (n * td + tn * d, d * td)
        return _ratio(n, d)
    if e.is_Mul:
        n, d = ONE, ONE
        for t in e.args:
            tn, td = _frac(t)
            n, d = n * tn, d * td
        return _ratio(n, d)
    if e.is_Pow and e.exp.is_Integer:
        k = int(e.exp)
        n, d = _frac(e.base)
        return _ratio(n ** k, d ** k) if k >= 0 else _ratio(d ** -k, n ** -k)
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        n, d = _frac(e.args[0])
        if isinstance(e, sympy.floor):
            return floordiv(n, d), ONE
        return -floordiv(-n, d), ONE
    if isinstance(e, sympy.Mod):
        return mod(from_sympy(e.args[0]), from_sympy(e.args[1])), ONE
    if isinstance(e, (sympy.Min, sympy.Max)):
        return minmax("min" if isinstance(e, sympy.Min) else "max", [from_sympy(a) for a in e.args]), ONE
    raise Unsupported(f"{type(e).__name__} in a dim")
