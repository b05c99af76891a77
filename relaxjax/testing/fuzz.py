"""Differential fuzzing: random numpy-API programs over random symbolic signatures, run on
every backend (jitted, with the symbolic signature and in automatic mode) and on NumPy.

A program is data: dims with bounds, input structs, and a list of :class:`Op` records
(each a source template over earlier values), so it prints as Python source, which is
also how it runs (``program(xp, *inputs)`` with ``xp`` = ``numpy`` or
``relaxjax.numpy``).  Programs are drawn by hypothesis (:func:`programs`), so a failure
shrinks to a small program and small shapes; :func:`reproducer` writes it as a
stand-alone script.

Ops: elementwise unary/binary ufuncs (total on their inputs: ``exp`` of clipped values,
``sqrt(abs(x))``, division by ``1 + |y|``...), comparisons and ``where``, broadcasting
(size-1 axes, lower ranks, Python scalars, dims as values), reductions (sum, mean, max,
min, var, argmax, any; axis, tuples, keepdims), reshapes provable from the symbolic shape
(flatten, merge, split ``n * 2`` into ``(n, 2)``, unit axes), slices (steps, negative
steps, symbolic stops), transposes, matmul, concatenate/stack, flip, casts.  Magnitudes are
tracked, and a value that could grow past 1e4 is squashed by ``tanh``.

Long campaigns: ``python -m relaxjax.testing.fuzz --programs 10000 [--seed S] [--out DIR]``.
"""
from __future__ import annotations

import argparse
import hashlib
import math
import os
import sys
import textwrap
import time
import traceback
from dataclasses import dataclass, field

import numpy as np
import sympy
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hseed
from hypothesis import strategies as st

from ..shapes import INF, dim_str, floordiv, interval, symbol
from ._core import arrays_for, assert_tree_close

LIMIT = 1e4               # magnitudes past this get squashed
DIM_NAMES = ("n0", "n1", "n2")


# ---------------------------------------------------------------------------------------
# Programs as data
# ---------------------------------------------------------------------------------------

@dataclass
class Op:
    """One binding: ``out = template.format(*names of args)``."""
    kind: str
    args: tuple
    template: str
    shape: tuple = ()           # symbolic shape of the result (for the printed comment)
    dtype: str = ""


@dataclass
class Program:
    dims: list                  # [(name, lo, hi)]
    inputs: list                # [(shape tuple of Dim, dtype str)]
    ops: list = field(default_factory=list)
    outputs: list = field(default_factory=list)     # value indices
    max_side: int = 8

    def names(self) -> list:
        return [f"x{i}" for i in range(len(self.inputs))] + [f"v{i}" for i in range(len(self.ops))]

    def signature(self):
        from ..jit import ShapeDtypeStruct
        return tuple(ShapeDtypeStruct(tuple(_user_dim(d, self.bounds()) for d in shp), dt)
                     for shp, dt in self.inputs)

    def bounds(self) -> dict:
        return {symbol(n): (lo, hi) for n, lo, hi in self.dims}

    def body(self) -> str:
        names = self.names()
        k = len(self.inputs)
        args = ", ".join(names[:k])
        L = [f"def program(xp, {args}):"]
        for i, op in enumerate(self.ops):
            L.append(f"    {names[k + i]} = {op.template.format(*[names[a] for a in op.args])}"
                     f"  # {_type_str(op.dtype, op.shape)}")
        outs = ", ".join(names[o] for o in self.outputs)
        L.append(f"    return ({outs},)" if len(self.outputs) == 1 else f"    return ({outs})")
        return "\n".join(L)

    def signature_source(self) -> str:
        L = []
        for n, lo, hi in self.dims:
            L.append(f"{n} = rj.dim({n!r}, min={lo}" + (f", max={hi})" if hi != INF else ")"))
        structs = ", ".join(f"rj.ShapeDtypeStruct(({''.join(dim_str(d) + ', ' for d in shp)}), {dt!r})"
                            for shp, dt in self.inputs)
        L.append(f"SIGNATURE = ({structs},)")
        return "\n".join(L)

    def compile(self):
        ns: dict = {}
        exec(compile(self.body(), "<relaxjax fuzz program>", "exec"), ns)  # noqa: S102 (generated)
        return ns["program"]

    def __str__(self) -> str:
        return self.signature_source() + "\n\n" + self.body()


def _type_str(dtype, shape) -> str:
    return f"{dtype}[{', '.join(dim_str(d) for d in shape)}]"


def _user_dim(d, bounds):
    if isinstance(d, int):
        return d
    from ..shapes import SymbolicDim
    return SymbolicDim(d, {s: bounds[s] for s in d.free_symbols})


# ---------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------

@dataclass
class _Val:
    shape: tuple
    dtype: np.dtype
    mag: float
    probe: np.ndarray
    exact: bool = True      # computed by correctly rounded ops only: bitwise equal everywhere


# ops whose results may differ in the last bits between NumPy and a backend (libm vs
# libmvec, summation order, gemm blocking)
INEXACT = {"tanh", "sin", "cos", "exp", "log1p", "sigmoid", "arctan", "mean", "var", "matmul"}
# ops that are discontinuous in a float argument: applied only to exact values, since an
# ulp of difference may flip their result
DISCONTINUOUS = {"floor", "rint", "sign", "mod", "greater", "less_equal", "equal", "not_equal",
                 "where_cmp", "argmax", "argmin", "cast_int"}


def _same(a, b) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return sympy.expand(sympy.sympify(a) - b) == 0


def _bcast(a: tuple, b: tuple):
    """The broadcast shape, or None unless every aligned pair is equal or one is 1."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if _same(x, y):
            out.append(x)
        elif x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        else:
            return None
    return tuple(reversed(out))


UNARY_F = {  # name: (template, magnitude bound from the input's)
    "tanh": ("xp.tanh({0})", lambda m: 1.0),
    "sin": ("xp.sin({0})", lambda m: 1.0),
    "cos": ("xp.cos({0})", lambda m: 1.0),
    "abs": ("xp.abs({0})", lambda m: m),
    "negative": ("-{0}", lambda m: m),
    "exp": ("xp.exp(xp.clip({0}, -5.0, 5.0))", lambda m: 148.5),
    "sqrt": ("xp.sqrt(xp.abs({0}))", lambda m: math.sqrt(m) + 1),
    "log1p": ("xp.log1p(xp.abs({0}))", lambda m: math.log1p(m) + 1),
    "sigmoid": ("1.0 / (1.0 + xp.exp(-{0}))", lambda m: 1.0),
    "square": ("xp.square({0})", lambda m: m * m),
    "floor": ("xp.floor({0})", lambda m: m + 1),
    "rint": ("xp.rint({0})", lambda m: m + 1),
    "sign": ("xp.sign({0})", lambda m: 1.0),
    "arctan": ("xp.arctan({0})", lambda m: 2.0),
    "mod": ("xp.mod({0}, 1.5)", lambda m: 1.5),
    "scale": ("{0} * 0.5", lambda m: m * 0.5),
}
UNARY_I = {
    "abs": ("xp.abs({0})", lambda m: m),
    "negative": ("-{0}", lambda m: m),
    "square": ("xp.square({0})", lambda m: m * m),
    "mod": ("{0} % 5", lambda m: 5.0),
    "floordiv": ("{0} // 3", lambda m: m),
}
BINARY = {  # name: (template, magnitude, kinds allowed)
    "add": ("{0} + {1}", lambda a, b: a + b, "fi"),
    "subtract": ("xp.subtract({0}, {1})", lambda a, b: a + b, "fi"),
    "multiply": ("{0} * {1}", lambda a, b: a * b, "fi"),
    "maximum": ("xp.maximum({0}, {1})", lambda a, b: max(a, b), "fi"),
    "minimum": ("xp.minimum({0}, {1})", lambda a, b: max(a, b), "fi"),
    "divide": ("{0} / (1.0 + xp.abs({1}))", lambda a, b: a, "f"),
    "floordiv": ("{0} // (xp.abs({1}) + 1)", lambda a, b: a, "i"),
}
COMPARE = {"greater": "{0} > {1}", "less_equal": "xp.less_equal({0}, {1})", "equal": "{0} == {1}",
           "not_equal": "xp.not_equal({0}, {1})"}
SCALARS_F = ["0.5", "2.0", "-1.5", "3"]
SCALARS_I = ["2", "-3", "7"]


class _Skip(Exception):
    """The drawn op does not fit (rank or size too large): draw another."""


MAX_RANK = 4
MAX_ELEMENTS = 1 << 18


class _Gen:
    def __init__(self, draw, dims, probe_dims, max_side=8):
        self.draw = draw
        self.max_side = max_side
        self.dims = dims
        self.bounds = {symbol(n): (lo, hi) for n, lo, hi in dims}
        self.probe_dims = probe_dims            # symbol -> int
        self.vals: list[_Val] = []
        self.ops: list[Op] = []
        self.n_inputs = 0

    # -- helpers ---------------------------------------------------------------------------
    def lo(self, d) -> int:
        return d if isinstance(d, int) else interval(d, self.bounds)[0]

    def ev(self, d) -> int:
        return d if isinstance(d, int) else int(d.xreplace({s: sympy.Integer(v) for s, v in self.probe_dims.items()}))

    def max_elements(self, shape) -> int:
        n = 1
        for d in shape:
            if isinstance(d, int):
                n *= d
            else:
                hi = interval(d, {s: (lo, min(hi, self.max_side)) for s, (lo, hi) in self.bounds.items()})[1]
                n *= int(hi) if hi != INF else self.max_side
        return n

    def pick(self, cands=None):
        cands = list(range(len(self.vals))) if cands is None else cands
        if not cands:
            raise _Skip
        # recent values more often: pick among the last few, or any
        return self.draw(st.one_of(st.sampled_from(cands[-3:]), st.sampled_from(cands)))

    def kind(self, i) -> str:
        return self.vals[i].dtype.kind

    def emit(self, kind, args, template, shape, mag):
        shape = tuple(sympy.expand(d) if not isinstance(d, int) else d for d in shape)
        shape = tuple(int(d) if not isinstance(d, int) and d.is_Integer else d for d in shape)
        limit = max([MAX_ELEMENTS] + [self.max_elements(self.vals[a].shape) for a in args])
        if len(shape) > max([MAX_RANK] + [len(self.vals[a].shape) for a in args]) or \
                self.max_elements(shape) > limit:
            raise _Skip
        names = [f"_a[{k}]" for k in range(len(args))]
        with np.errstate(all="ignore"):
            probe = eval(template.format(*names), {"xp": np, "_a": [self.vals[a].probe for a in args]})  # noqa: S307
        probe = np.asarray(probe)
        want = tuple(self.ev(d) for d in shape)
        if probe.shape != want:
            raise AssertionError(f"fuzz generator: {kind} {template} gives {probe.shape}, expected "
                                 f"{want} = {shape}")
        if probe.dtype.kind == "f" and mag > LIMIT:
            template, mag = f"xp.tanh({template})", 1.0
            probe = np.tanh(probe)
        elif probe.dtype.kind in "iu" and mag > LIMIT:
            template, mag = f"({template}) % 97", 97.0
            probe = probe % 97
        exact = all(self.vals[a].exact for a in args)
        if kind in INEXACT or kind == "sum" and probe.dtype.kind == "f":
            exact = probe.dtype.kind != "f" and exact
        self.ops.append(Op(kind, tuple(args), template, shape, str(probe.dtype)))
        self.vals.append(_Val(shape, probe.dtype, float(mag), probe, exact))
        return len(self.vals) - 1

    # -- ops -------------------------------------------------------------------------------
    def unary(self):
        i = self.pick()
        v = self.vals[i]
        k = v.dtype.kind
        if k == "b":
            return self.emit("logical_not", [i], "xp.logical_not({0})", v.shape, 1.0)
        table = UNARY_F if k == "f" else UNARY_I
        names = sorted(n for n in table if v.exact or k != "f" or n not in DISCONTINUOUS)
        name = self.draw(st.sampled_from(names))
        tmpl, mag = table[name]
        return self.emit(name, [i], tmpl, v.shape, mag(v.mag))

    def binary(self, compare=False):
        ok = (lambda v: v.dtype.kind in "fi" and (v.exact or not compare))
        i = self.pick([j for j, v in enumerate(self.vals) if ok(v)])
        a = self.vals[i]
        partners = [j for j, v in enumerate(self.vals) if ok(v) and _bcast(a.shape, v.shape) is not None]
        use_scalar = self.draw(st.integers(0, 4)) == 0
        if compare:
            name = self.draw(st.sampled_from(sorted(COMPARE)))
            tmpl = COMPARE[name]
        else:
            names = sorted(n for n, (_, _, kinds) in BINARY.items() if a.dtype.kind in kinds)
            name = self.draw(st.sampled_from(names))
            tmpl, magf, kinds = BINARY[name]
            partners = [j for j in partners if self.vals[j].dtype.kind in kinds or kinds == "fi"]
        if use_scalar or not partners:
            c = self.draw(st.sampled_from(SCALARS_F if a.dtype.kind == "f" else SCALARS_I +
                                          ["{0}.shape[-1]" if a.shape else "2"]))
            c = c.format("{0}")
            tmpl2 = tmpl.replace("{1}", c)
            mag = 1.0 if compare else magf(a.mag, float(self._scalar_mag(c, a)))
            return self.emit(name, [i], tmpl2, a.shape, mag)
        j = self.pick(partners)
        b = self.vals[j]
        if self.draw(st.booleans()) and not compare:
            i, j, a, b = j, i, b, a
            if name in ("divide", "floordiv") and a.dtype.kind != ("f" if name == "divide" else "i"):
                i, j, a, b = j, i, b, a
        shape = _bcast(a.shape, b.shape)
        mag = 1.0 if compare else magf(a.mag, b.mag)
        return self.emit(name, [i, j], tmpl, shape, mag)

    def _scalar_mag(self, c, a):
        if "shape" in c:
            d = a.shape[-1]
            return d if isinstance(d, int) else interval(d, self.bounds)[1] if \
                interval(d, self.bounds)[1] != INF else 64
        return abs(float(c))

    def dim_value(self):
        """A dim used as a value: x * x.shape[k], x / x.shape[k], x + x.shape[k]."""
        i = self.pick([j for j, v in enumerate(self.vals) if v.dtype.kind == "f" and v.shape])
        v = self.vals[i]
        ax = self.draw(st.integers(0, len(v.shape) - 1))
        op = self.draw(st.sampled_from(["/", "*", "-"]))
        tmpl = f"{{0}} {op} {{0}}.shape[{ax}]"
        hi = interval(v.shape[ax], self.bounds)[1] if not isinstance(v.shape[ax], int) else v.shape[ax]
        hi = 64 if hi == INF else hi
        mag = v.mag if op == "/" else v.mag * hi if op == "*" else v.mag + hi
        return self.emit("dim_value", [i], tmpl, v.shape, mag)

    def compare_or_where(self):
        if self.draw(st.booleans()):
            return self.binary(compare=True)
        bools = [j for j, v in enumerate(self.vals) if v.dtype.kind == "b"]
        nums = [j for j, v in enumerate(self.vals) if v.dtype.kind in "fi"]
        i = self.pick(nums)
        if bools and not self.vals[i].exact:        # no comparison of inexact values
            cs = [j for j in bools if _bcast(self.vals[j].shape, self.vals[i].shape) is not None]
            if cs:
                c = self.pick(cs)
                a = self.vals[i]
                return self.emit("where", [c, i], "xp.where({0}, {1}, 0.0)" if a.dtype.kind == "f"
                                 else "xp.where({0}, {1}, 0)", _bcast(self.vals[c].shape, a.shape), a.mag)
        nums = [j for j in nums if self.vals[j].exact]
        i = self.pick(nums)
        a = self.vals[i]
        if bools and self.draw(st.booleans()):
            cs = [j for j in bools if _bcast(self.vals[j].shape, a.shape) is not None]
            if cs:
                c = self.pick(cs)
                shape = _bcast(self.vals[c].shape, a.shape)
                return self.emit("where", [c, i], "xp.where({0}, {1}, 0.0)" if a.dtype.kind == "f"
                                 else "xp.where({0}, {1}, 0)", shape, a.mag)
        partners = [j for j in nums if _bcast(a.shape, self.vals[j].shape) is not None]
        j = self.pick(partners)
        b = self.vals[j]
        shape = _bcast(a.shape, b.shape)
        form = self.draw(st.sampled_from(["xp.where({0} > {1}, {0}, {1})", "xp.where({0} < 0, {1}, {0})",
                                          "xp.where({1} >= {0}, -{0}, {1})"]))
        return self.emit("where_cmp", [i, j], form, shape, max(a.mag, b.mag))

    def reduce(self):
        i = self.pick()
        v = self.vals[i]
        r = len(v.shape)
        k = v.dtype.kind
        fns = ["any", "all"] if k == "b" else ["sum", "mean", "max", "min"] + \
            (["var"] if k == "f" else []) + (["argmax", "argmin"] if v.exact or k != "f" else [])
        fn = self.draw(st.sampled_from(fns))
        if r == 0:
            axis = None
        else:
            form = self.draw(st.integers(0, 3 if r >= 2 and fn not in ("argmax", "argmin") else 2))
            if form == 0:
                axis = None
            elif form in (1, 2):
                axis = self.draw(st.integers(-r, r - 1))
            else:
                axis = tuple(sorted(self.draw(st.lists(st.integers(0, r - 1), min_size=2, max_size=r,
                                                       unique=True))))
        keepdims = self.draw(st.booleans())
        if fn in ("argmax", "argmin") and axis is None:
            keepdims = False
        axes = set(range(r)) if axis is None else {axis % r} if isinstance(axis, int) else set(axis)
        shape = tuple((1 if a in axes else d) for a, d in enumerate(v.shape) if keepdims or a not in axes)
        count = 1
        for a in axes:
            d = v.shape[a]
            hi = d if isinstance(d, int) else interval(d, self.bounds)[1]
            count *= 64 if hi == INF else hi
        mag = {"sum": v.mag * count, "var": v.mag * v.mag * 4, "argmax": count, "argmin": count,
               "any": 1.0, "all": 1.0}.get(fn, v.mag)
        kd = f", keepdims={keepdims}" if keepdims else ""
        return self.emit(fn, [i], f"xp.{fn}({{0}}, axis={axis!r}{kd})", shape, mag)

    def reshape(self):
        i = self.pick()
        v = self.vals[i]
        s, r = v.shape, len(v.shape)
        forms = ["flatten", "unit", "ravel"]
        if r >= 2:
            forms += ["merge", "first_rest"]
        if r >= 1 and any(d == 1 for d in s):
            forms.append("squeeze")
        splittable = [a for a, d in enumerate(s) if not isinstance(d, int) and
                      _coeff_gcd(d) > 1 and self.lo(d) > 0]
        splittable += [a for a, d in enumerate(s) if isinstance(d, int) and d in (4, 6)]
        if splittable:
            forms.append("split")
        form = self.draw(st.sampled_from(forms))
        n = 1
        for d in s:
            n = n * d
        if form in ("flatten", "ravel"):
            tmpl = "xp.reshape({0}, (-1,))" if form == "flatten" else "xp.ravel({0})"
            return self.emit("reshape", [i], tmpl, (n,), v.mag)
        if form == "unit":
            a = self.draw(st.integers(0, r))
            parts = ([f"*{{0}}.shape[:{a}]"] if a else []) + ["1"] + ([f"*{{0}}.shape[{a}:]"] if a < r else [])
            return self.emit("reshape", [i], f"xp.reshape({{0}}, ({', '.join(parts)},))",
                             s[:a] + (1,) + s[a:], v.mag)
        if form == "squeeze":
            a = self.draw(st.sampled_from([a for a, d in enumerate(s) if d == 1]))
            return self.emit("squeeze", [i], f"xp.squeeze({{0}}, axis={a})", s[:a] + s[a + 1:], v.mag)
        if form == "first_rest":
            return self.emit("reshape", [i], "{0}.reshape({0}.shape[0], -1)", (s[0], n // s[0] if
                             isinstance(n, int) else sympy.expand(sympy.sympify(n) / s[0])), v.mag)
        if form == "merge":
            a = self.draw(st.integers(0, r - 2))
            parts = [f"{{0}}.shape[{k}]" for k in range(a)] + [f"{{0}}.shape[{a}] * {{0}}.shape[{a + 1}]"] + \
                [f"{{0}}.shape[{k}]" for k in range(a + 2, r)]
            return self.emit("reshape", [i], f"xp.reshape({{0}}, ({', '.join(parts)},))",
                             s[:a] + (s[a] * s[a + 1],) + s[a + 2:], v.mag)
        a = self.draw(st.sampled_from(splittable))
        d = s[a]
        c = (2 if d % 2 == 0 else 3) if isinstance(d, int) else _coeff_gcd(d)
        q = d // c if isinstance(d, int) else sympy.expand(d / c)
        lead = self.draw(st.booleans())
        parts = [f"{{0}}.shape[{k}]" for k in range(a)]
        parts += ([f"{{0}}.shape[{a}] // {c}", str(c)] if lead else [str(c), f"{{0}}.shape[{a}] // {c}"])
        parts += [f"{{0}}.shape[{k}]" for k in range(a + 1, r)]
        new = s[:a] + ((q, c) if lead else (c, q)) + s[a + 1:]
        return self.emit("reshape", [i], f"xp.reshape({{0}}, ({', '.join(parts)},))", new, v.mag)

    def slice(self):
        i = self.pick([j for j, v in enumerate(self.vals) if v.shape])
        v = self.vals[i]
        s, r = v.shape, len(v.shape)
        a = self.draw(st.integers(0, r - 1))
        d = s[a]
        forms = ["rev", "step2", "first", "last", "idx0", "idxm1"]
        if self.lo(d) >= 2:
            forms += ["drop_first", "drop_last", "half", "rev_step2"]
        form = self.draw(st.sampled_from(forms))
        sub, new = {
            "rev": ("::-1", d),
            "step2": ("::2", floordiv(d + 1, 2)),
            "first": (":1", 1),
            "last": ("-1:", 1),
            "idx0": ("0", None),
            "idxm1": ("-1", None),
            "drop_first": ("1:", d - 1),
            "drop_last": (":-1", d - 1),
            "half": (f":{{0}}.shape[{a}] // 2", floordiv(d, 2)),
            "rev_step2": ("::-2", floordiv(d + 1, 2)),
        }[form]
        idx = ", ".join([":"] * a + [sub])
        if self.draw(st.booleans()) and a == r - 1 and a > 0:
            idx = "..., " + sub
        shape = s[:a] + (() if new is None else (new,)) + s[a + 1:]
        return self.emit("slice", [i], f"{{0}}[{idx}]", shape, v.mag)

    def transpose(self):
        i = self.pick([j for j, v in enumerate(self.vals) if len(v.shape) >= 2])
        v = self.vals[i]
        r = len(v.shape)
        form = self.draw(st.sampled_from(["perm", "T", "swap"]))
        if form == "T":
            return self.emit("transpose", [i], "{0}.T", tuple(reversed(v.shape)), v.mag)
        if form == "swap":
            a, b = self.draw(st.lists(st.integers(0, r - 1), min_size=2, max_size=2, unique=True))
            s = list(v.shape)
            s[a], s[b] = s[b], s[a]
            return self.emit("transpose", [i], f"xp.swapaxes({{0}}, {a}, {b})", tuple(s), v.mag)
        perm = self.draw(st.permutations(list(range(r))))
        return self.emit("transpose", [i], f"xp.transpose({{0}}, {tuple(perm)!r})",
                         tuple(v.shape[p] for p in perm), v.mag)

    def matmul(self):
        i = self.pick([j for j, v in enumerate(self.vals) if v.shape and v.dtype.kind in "fi"])
        a = self.vals[i]
        k = a.shape[-1]
        partners = []
        for j, b in enumerate(self.vals):
            if b.dtype.kind not in "fi" or not b.shape:
                continue
            if len(b.shape) == 1 and _same(b.shape[0], k):
                partners.append(j)
            elif len(b.shape) >= 2 and _same(b.shape[-2], k) and \
                    (len(a.shape) == 1 or _bcast(a.shape[:-2], b.shape[:-2]) is not None):
                partners.append(j)
        if partners and self.draw(st.integers(0, 3)) > 0:
            j = self.pick(partners)
            b = self.vals[j]
            tmpl = "{0} @ {1}" if self.draw(st.booleans()) else "xp.matmul({0}, {1})"
            args = [i, j]
            bshape = b.shape
        else:
            if len(a.shape) == 1:
                tmpl, bshape = "{0} @ {0}", a.shape
            else:
                tmpl = "{0} @ xp.swapaxes({0}, -1, -2)"
                bshape = a.shape[:-2] + (a.shape[-1], a.shape[-2])
            args = [i]
            b = a
        if len(a.shape) == 1 and len(bshape) == 1:
            shape = ()
        elif len(a.shape) == 1:
            shape = bshape[:-2] + bshape[-1:]
        elif len(bshape) == 1:
            shape = a.shape[:-1]
        else:
            shape = _bcast(a.shape[:-2], bshape[:-2]) + (a.shape[-2], bshape[-1])
        hi = k if isinstance(k, int) else interval(k, self.bounds)[1]
        hi = 64 if hi == INF else hi
        return self.emit("matmul", args, tmpl, shape, a.mag * b.mag * hi)

    def concat(self):
        i = self.pick([j for j, v in enumerate(self.vals) if v.shape])
        a = self.vals[i]
        r = len(a.shape)
        if self.draw(st.integers(0, 3)) == 0:      # stack: equal shapes
            same = [j for j, v in enumerate(self.vals) if len(v.shape) == r and
                    all(_same(x, y) for x, y in zip(v.shape, a.shape))]
            j = self.pick(same)
            ax = self.draw(st.integers(0, r))
            shape = a.shape[:ax] + (2,) + a.shape[ax:]
            return self.emit("stack", [i, j], f"xp.stack([{{0}}, {{1}}], axis={ax})", shape,
                             max(a.mag, self.vals[j].mag))
        ax = self.draw(st.integers(0, r - 1))
        partners = [j for j, v in enumerate(self.vals) if len(v.shape) == r and
                    all(_same(x, y) for k, (x, y) in enumerate(zip(v.shape, a.shape)) if k != ax)]
        j = self.pick(partners)
        b = self.vals[j]
        shape = a.shape[:ax] + (a.shape[ax] + b.shape[ax],) + a.shape[ax + 1:]
        neg = self.draw(st.booleans())
        return self.emit("concatenate", [i, j], f"xp.concatenate([{{0}}, {{1}}], axis={ax - r if neg else ax})",
                         shape, max(a.mag, b.mag))

    def flip(self):
        i = self.pick([j for j, v in enumerate(self.vals) if v.shape])
        v = self.vals[i]
        ax = self.draw(st.integers(0, len(v.shape) - 1))
        return self.emit("flip", [i], f"xp.flip({{0}}, axis={ax})", v.shape, v.mag)

    def cast(self):
        i = self.pick()
        v = self.vals[i]
        k = v.dtype.kind
        if k == "f":
            to = self.draw(st.sampled_from(["float32", "float64"] + (["int64", "int32"] if v.exact else [])))
            if to.startswith("int"):
                return self.emit("cast_int", [i], f"xp.floor({{0}}).astype(xp.{to})", v.shape, v.mag + 1)
        else:
            to = self.draw(st.sampled_from(["float32", "float64"] + (["int32", "int64"] if k == "b" else [])))
        return self.emit("cast", [i], f"{{0}}.astype(xp.{to})", v.shape, max(v.mag, 1.0))

    def expand(self):
        i = self.pick()
        v = self.vals[i]
        r = len(v.shape)
        ax = self.draw(st.integers(0, r))
        if self.draw(st.booleans()):
            return self.emit("expand_dims", [i], f"xp.expand_dims({{0}}, {ax})", v.shape[:ax] + (1,) + v.shape[ax:],
                             v.mag)
        idx = ", ".join([":"] * ax + ["None"])
        return self.emit("expand_dims", [i], f"{{0}}[{idx}]", v.shape[:ax] + (1,) + v.shape[ax:], v.mag)

    OPS = ["unary", "unary", "unary", "binary", "binary", "binary", "binary", "compare_or_where", "reduce",
           "reduce", "reshape", "slice", "transpose", "matmul", "concat", "flip", "cast", "expand",
           "dim_value"]

    def step(self):
        name = self.draw(st.sampled_from(self.OPS))
        try:
            getattr(self, name)()
        except _Skip:
            self.unary()


def _coeff_gcd(d) -> int:
    """The gcd of the integer coefficients of a linear expression (2 for 2*n + 4)."""
    g = 0
    for t in sympy.Add.make_args(sympy.expand(d)):
        c, _ = t.as_coeff_Mul()
        if not c.is_Integer:
            return 1
        g = math.gcd(g, int(c))
    return g


@st.composite
def programs(draw, min_ops: int = 1, max_ops: int = 30, float_only: bool = False):
    """A hypothesis strategy of :class:`Program`."""
    ndims = draw(st.integers(1, len(DIM_NAMES)))
    dims = []
    for n in DIM_NAMES[:ndims]:
        lo = draw(st.sampled_from([1, 2]))
        hi = draw(st.sampled_from([INF, 16, 64]))
        dims.append((n, lo, hi))
    syms = [symbol(n) for n, _, _ in dims]
    probe_dims = {s: max(lo, min(3 + 2 * k, hi)) for k, (s, (_, lo, hi)) in enumerate(zip(syms, dims))}
    max_side = draw(st.sampled_from([4, 8, 8, 16, 40]))
    g = _Gen(draw, dims, probe_dims, max_side)
    # inputs: suffixes of a base shape (so they broadcast), some axes 1, some n * 2 or n + 1
    base = [draw(st.sampled_from(syms)) for _ in range(3)]
    family = draw(st.sampled_from(["float64"] * 6 + ["float32"] * 2 + ["mixed"] * 2))
    n_in = draw(st.integers(1, 3))
    inputs = []
    rng = np.random.default_rng(0)
    plain: set = set()
    for _ in range(n_in):
        r = draw(st.integers(0, 3))
        shape = []
        for d in base[3 - r:]:
            form = draw(st.sampled_from(["dim", "dim", "dim", "dim", "one", "int", "times2", "plus1"]))
            if form == "dim":
                shape.append(d)
                plain.add(d)
            elif form == "one":
                shape.append(1)
            elif form == "int":
                shape.append(draw(st.sampled_from([2, 3, 4])))
            elif form == "times2":
                shape.append(d * 2)
            else:
                shape.append(d + 1)
        if family == "mixed":
            dtype = draw(st.sampled_from(["float64", "float32", "int64", "int32", "bool"]))
        else:
            dtype = family
        inputs.append((tuple(shape), dtype))
    if float_only:
        inputs = [(s, "float64" if dt in ("int64", "int32", "bool") else dt) for s, dt in inputs]
    used = set()
    for shp, _ in inputs:
        for d in shp:
            used |= getattr(d, "free_symbols", set())
    dims = [(n, lo, hi) for n, lo, hi in dims if symbol(n) in used]
    g.dims = dims
    for shp, dt in inputs:
        probe_shape = tuple(g.ev(d) for d in shp)
        if dt == "bool":
            probe = rng.random(probe_shape) < 0.5
        elif dt.startswith("int"):
            probe = rng.integers(-8, 9, probe_shape).astype(dt)
        else:
            probe = rng.uniform(-4, 4, probe_shape).astype(dt)
        g.vals.append(_Val(shp, np.dtype(dt), 8.0, probe))
    g.n_inputs = len(inputs)
    if not any(v.dtype.kind in "fi" for v in g.vals):
        g.emit("cast", [0], "{0}.astype(xp.float64)", g.vals[0].shape, 1.0)
    n_ops = draw(st.integers(min_ops, max_ops))
    while len(g.ops) < n_ops:
        g.step()
    k = len(inputs)
    last = k + len(g.ops) - 1
    extra = draw(st.lists(st.integers(k, last), max_size=2, unique=True))
    outputs = [last] + [o for o in extra if o != last]
    prog = Program(dims, inputs, g.ops, outputs, max_side=max_side)
    return prog


# ---------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------

def low_precision(prog: Program) -> bool:
    """Whether any value of the program is float32 or narrower (a float64 result may then
    carry float32 rounding, e.g. after a cast)."""
    dts = [np.dtype(dt) for _, dt in prog.inputs] + [np.dtype(op.dtype) for op in prog.ops]
    return any(d.kind == "f" and d.itemsize <= 4 for d in dts)


def tolerance_for(prog: Program, dtype) -> dict:
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        return dict(rtol=0, atol=0)
    if dtype.itemsize <= 4 or low_precision(prog):
        return dict(rtol=2e-3, atol=2e-4)
    return dict(rtol=1e-7, atol=1e-8)


class Failure(AssertionError):
    def __init__(self, message, program, inputs, dims, backend, mode):
        super().__init__(message)
        self.program, self.inputs, self.dims = program, inputs, dims
        self.backend, self.mode = backend, mode


def _compare(got, want, prog):
    got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
    want = tuple(want)
    if len(got) != len(want):
        raise AssertionError(f"{len(got)} results, expected {len(want)}")
    for k, (g, w) in enumerate(zip(got, want)):
        tol = tolerance_for(prog, np.asarray(w).dtype)
        try:
            assert_tree_close(np.asarray(g) if isinstance(g, np.generic) else g, np.asarray(w), **tol)
        except AssertionError as e:
            raise AssertionError(f"output {k}: {e}") from None


def targets(backends=None, modes=("explicit", "auto")) -> list:
    from ..backends import available_backends
    bs = available_backends() if backends is None else list(backends)
    return [(b, m) for b in bs for m in modes]


def check_program(prog: Program, input_sets: list, backends=None, modes=("explicit", "auto")) -> None:
    """Run ``prog`` on NumPy and jitted on each (backend, mode) for every input set (one jit
    per target, reused across the sets); raise :class:`Failure` at the first difference."""
    import relaxjax as rj
    import relaxjax.numpy as rnp
    fn = prog.compile()
    sig = prog.signature()
    jits = {}
    for arrays, dims in input_sets:
        with np.errstate(all="ignore"):
            want = fn(np, *[np.array(a) for a in arrays])
        for backend, mode in targets(backends, modes):
            key = (backend, mode)
            try:
                if key not in jits:
                    jits[key] = rj.jit(lambda *xs: fn(rnp, *xs), backend=backend,
                                       shapes=sig if mode == "explicit" else None)
                with np.errstate(all="ignore"):
                    got = jits[key](*arrays)
                _compare(got, want, prog)
            except Exception as e:
                kind = "differs" if isinstance(e, AssertionError) else f"raised {type(e).__name__}"
                msg = (f"{backend} backend, {mode} mode {kind}: {e}\n"
                       f"dims: {dims}; input shapes: {[a.shape for a in arrays]}\n{prog}")
                raise Failure(msg, prog, arrays, dims, backend, mode) from e


# ---------------------------------------------------------------------------------------
# Minimizing a failure (beyond what hypothesis shrinks): fewer outputs, dead ops removed,
# ops bypassed, unused inputs dropped, smaller dims
# ---------------------------------------------------------------------------------------

def _rebuild(prog: Program, outputs: list, subst: dict | None = None) -> tuple:
    """``prog`` computing only ``outputs`` (value ids), with value ``a`` replaced by
    ``subst[a]``; dead ops, unused inputs and unused dims are dropped."""
    subst = subst or {}
    k = len(prog.inputs)

    def res(v):
        while v in subst:
            v = subst[v]
        return v
    need, stack = set(), [res(o) for o in outputs]
    while stack:
        v = stack.pop()
        if v in need:
            continue
        need.add(v)
        if v >= k:
            stack += [res(a) for a in prog.ops[v - k].args]
    keep_in = [i for i in range(k) if i in need]
    keep_ops = [v for v in range(k, k + len(prog.ops)) if v in need]
    new_id = {v: n for n, v in enumerate(keep_in + keep_ops)}
    ops = [Op(prog.ops[v - k].kind, tuple(new_id[res(a)] for a in prog.ops[v - k].args),
              prog.ops[v - k].template, prog.ops[v - k].shape, prog.ops[v - k].dtype) for v in keep_ops]
    inputs = [prog.inputs[i] for i in keep_in]
    used = set()
    for shp, _ in inputs:
        for d in shp:
            used |= getattr(d, "free_symbols", set())
    dims = [(n, lo, hi) for n, lo, hi in prog.dims if symbol(n) in used]
    outs = []
    for o in outputs:
        if new_id[res(o)] not in outs:
            outs.append(new_id[res(o)])
    return Program(dims, inputs, ops, outs, prog.max_side), keep_in


def _kind_of(f: Failure) -> tuple:
    c = f.__cause__
    if type(c) is AssertionError:
        what = "dtype" if "dtype" in str(c) else "shape" if "shape" in str(c) else "values"
        return (f.backend, f.mode, "differs", what)
    return (f.backend, f.mode, type(c).__name__)


def _try(prog, inputs, dims, backend, mode):
    try:
        check_program(prog, [(tuple(inputs), dims)], [backend], (mode,))
    except Failure as f:
        return f
    except Exception:           # the candidate itself is broken (e.g. NumPy rejects it)
        return None
    return None


def minimize(f: Failure, budget_s: float = 120.0) -> Failure:
    """A smaller program and smaller inputs failing the same way (same target, same kind
    of failure), by greedy steps while ``budget_s`` lasts."""
    t0 = time.time()
    kind = _kind_of(f)
    best = f

    def attempt(prog, keep_in, inputs=None, dims=None):
        nonlocal best
        if time.time() - t0 > budget_s:
            return False
        ins = [best.inputs[i] for i in keep_in] if inputs is None else inputs
        g = _try(prog, ins, dims if dims is not None else best.dims, best.backend, best.mode)
        if g is not None and _kind_of(g) == kind:
            best = g
            return True
        return False

    changed = True
    while changed and time.time() - t0 < budget_s:
        changed = False
        prog = best.program
        k = len(prog.inputs)
        # one output at a time
        if len(prog.outputs) > 1:
            for o in prog.outputs:
                cand, keep = _rebuild(prog, [o])
                if attempt(cand, keep):
                    changed = True
                    break
            if changed:
                continue
        # bypass an op: use one of its arguments (same shape and dtype) or an earlier value
        for v in reversed(range(k, k + len(prog.ops))):
            op = prog.ops[v - k]
            for a in op.args:
                src = prog.ops[a - k] if a >= k else None
                shp = src.shape if src else prog.inputs[a][0]
                dt = src.dtype if src else prog.inputs[a][1]
                if dt == op.dtype and len(shp) == len(op.shape) and all(_same(x, y) for x, y in zip(shp, op.shape)):
                    cand, keep = _rebuild(prog, prog.outputs, {v: a})
                    if attempt(cand, keep):
                        changed = True
                        break
            if changed:
                break
        if changed:
            continue
        # the output itself earlier: an output's argument as the output
        for o in prog.outputs:
            if o >= k:
                for a in prog.ops[o - k].args:
                    cand, keep = _rebuild(prog, [a if x == o else x for x in prog.outputs])
                    if attempt(cand, keep):
                        changed = True
                        break
            if changed:
                break
        if changed:
            continue
        # smaller dims (arrays cut to the new shapes)
        for name, lo, hi in prog.dims:
            cur = best.dims.get(name)
            if cur is None:
                continue
            for v in sorted({lo, max(lo, 1), lo + 1, cur // 2, cur - 1}):
                if not (max(lo, 1) <= v < cur):
                    continue
                dims = dict(best.dims, **{name: v})
                vals = {symbol(n): x for n, x in dims.items()}
                ins, ok = [], True
                for (shp, _), a in zip(prog.inputs, best.inputs):
                    new = tuple(d if isinstance(d, int) else int(d.xreplace(vals)) for d in shp)
                    if any(x < 1 or x > y for x, y in zip(new, a.shape)):
                        ok = False
                        break
                    ins.append(np.array(a[tuple(slice(0, x) for x in new)], copy=True))
                if ok and attempt(prog, list(range(len(prog.inputs))), ins, dims):
                    changed = True
                    break
            if changed:
                break
        if changed:
            continue
        # rounder input values
        for i, a in enumerate(best.inputs):
            if a.dtype.kind == "f" and not np.array_equal(a, np.round(a)):
                ins = list(best.inputs)
                ins[i] = np.round(a).astype(a.dtype)
                if attempt(prog, list(range(len(prog.inputs))), ins):
                    changed = True
                    break
    return best


def reproducer(f: Failure) -> str:
    """A stand-alone Python script reproducing a failure (exits 1 while it still fails)."""
    arrays = []
    for k, a in enumerate(f.inputs):
        arrays.append(f"    x{k} = np.array({a.tolist()!r}, dtype={str(a.dtype)!r}).reshape({a.shape!r})")
    first = str(f).split("\n")[0]
    return "\n".join([
        f'"""relaxjax fuzz reproducer: {f.backend} backend, {f.mode} mode.',
        "",
        textwrap.indent(first, ""),
        '"""',
        "import sys",
        "",
        "import numpy as np",
        "",
        "import relaxjax as rj",
        "import relaxjax.numpy as rnp",
        "from relaxjax.testing import assert_tree_close",
        "",
        f.program.signature_source(),
        f"DIMS = {f.dims!r}",
        "",
        "",
        f.program.body(),
        "",
        "",
        "def main():",
        *arrays,
        f"    args = ({''.join(f'x{k}, ' for k in range(len(f.inputs)))})",
        "    with np.errstate(all='ignore'):",
        "        want = program(np, *args)",
        f"    f = rj.jit(lambda *xs: program(rnp, *xs), backend={f.backend!r}"
        + (", shapes=SIGNATURE)" if f.mode == "explicit" else ")"),
        "    got = f(*args)",
        "    for g, w in zip(got, want):",
        "        if np.asarray(w).dtype.kind == 'f':",
        f"            tol = {tolerance_for(f.program, 'float64')!r}" + ("  # float32 values in the program" if
                                                                       low_precision(f.program) else ""),
        "        else:",
        "            tol = {}",
        "        assert_tree_close(np.asarray(g), np.asarray(w), **tol)",
        "    print('ok: the program agrees with NumPy')",
        "",
        "",
        "if __name__ == '__main__':",
        "    main()",
        "",
    ])


def fuzz(n_programs: int, *, seed: int | None = None, backends=None, modes=("explicit", "auto"),
         max_ops: int = 30, input_sets: int = 2, database=None, on_program=None, min_ops: int = 1,
         shrink: bool = True, minimize_s: float = 0.0):
    """Run one hypothesis search over ``n_programs`` programs; raises the :class:`Failure` of
    the first failing program, shrunk by hypothesis (``shrink``) and then by
    :func:`minimize` for up to ``minimize_s`` seconds."""
    last: list = []

    @st.composite
    def case(draw):
        prog = draw(programs(min_ops=min_ops, max_ops=max_ops))
        sig = prog.signature()
        sets = [draw(arrays_for(sig, min_side=1, max_side=prog.max_side, with_dims=True))
                for _ in range(input_sets)]
        return prog, sets

    @settings(max_examples=n_programs, deadline=None, database=database,
              suppress_health_check=list(HealthCheck), print_blob=False, report_multiple_bugs=False,
              verbosity=Verbosity.quiet,
              phases=list(Phase) if shrink else [p for p in Phase if p != Phase.shrink])
    @given(case())
    def run(c):
        prog, sets = c
        if on_program is not None:
            on_program(prog)
        try:
            check_program(prog, sets, backends, modes)
        except Failure as f:
            last[:] = [f]
            raise
    if seed is not None:
        run = hseed(seed)(run)
    try:
        run()
    except Failure as e:
        f = last[0] if last else e
        if minimize_s > 0:
            f = minimize(f, minimize_s)
        raise f from f.__cause__


# ---------------------------------------------------------------------------------------
# Campaign
# ---------------------------------------------------------------------------------------

def _signature_of(f: Failure) -> str:
    """What identifies a bug: target, error type and first line, op kinds involved."""
    cause = f.__cause__
    head = f"{type(cause).__name__}" if cause is not None else "Failure"
    if type(cause) is AssertionError:
        head += ":" + ("dtype" if "dtype" in str(cause) else "shape" if "shape" in str(cause) else "values")
    else:
        head += ":" + str(cause).split("\n")[0][:80]
    kinds = ",".join(sorted({op.kind for op in f.program.ops}))
    return f"{f.backend}/{f.mode}/{head}/{kinds}"


def campaign(n_programs: int, seed: int = 0, out: str = "fuzz-failures", chunk: int = 200,
             time_limit: float | None = None, max_ops: int = 30, log=print, shrink: bool = False,
             minimize_s: float = 60.0) -> dict:
    """Many searches of ``chunk`` programs (each seeded ``seed + k``) until ``n_programs``
    programs ran; each distinct failure is written to ``out`` as a reproducer script."""
    os.makedirs(out, exist_ok=True)
    count = [0]
    seen: dict = {}
    t0 = time.time()
    current = os.path.join(out, "_current_program.py")

    def on_program(prog):
        count[0] += 1
        with open(current, "w") as fh:          # survives a crash of the process
            fh.write(str(prog) + "\n")

    k = 0
    while count[0] < n_programs and (time_limit is None or time.time() - t0 < time_limit):
        todo = min(chunk, n_programs - count[0])
        before = count[0]
        try:
            fuzz(todo, seed=seed + k, max_ops=max_ops, on_program=on_program, shrink=shrink,
                 minimize_s=minimize_s)
        except Failure as f:
            sig = _signature_of(f)
            seen.setdefault(sig, 0)
            seen[sig] += 1
            if seen[sig] == 1:
                name = "fail_" + hashlib.sha256(sig.encode()).hexdigest()[:10] + ".py"
                with open(os.path.join(out, name), "w") as fh:
                    fh.write(reproducer(f))
                log(f"[{count[0]} programs, {time.time() - t0:.0f}s] FAILURE {sig} -> {name}\n"
                    + textwrap.indent(str(f).split("\n")[0][:400], "    "))
            else:
                log(f"[{count[0]} programs] again: {sig}")
        except Exception:          # a bug of the fuzzer itself: report, go on
            log("fuzzer error:\n" + traceback.format_exc())
        if count[0] == before:
            break
        k += 1
        log(f"[{count[0]} programs, {time.time() - t0:.0f}s] {len(seen)} distinct failures")
    if os.path.exists(current):
        os.remove(current)
    return {"programs": count[0], "seconds": time.time() - t0, "failures": seen}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m relaxjax.testing.fuzz", description=__doc__.split("\n")[0])
    p.add_argument("--programs", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="fuzz-failures", help="directory for reproducer scripts")
    p.add_argument("--chunk", type=int, default=200, help="programs per hypothesis search")
    p.add_argument("--time-limit", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--max-ops", type=int, default=30)
    p.add_argument("--shrink", action="store_true",
                   help="let hypothesis shrink failures too (thorough, slow: each attempt compiles)")
    p.add_argument("--minimize-seconds", type=float, default=60.0,
                   help="time to minimize each failure (ops, outputs, dims, values)")
    a = p.parse_args(argv)
    r = campaign(a.programs, a.seed, a.out, a.chunk, a.time_limit, a.max_ops, shrink=a.shrink,
                 minimize_s=a.minimize_seconds)
    print(f"{r['programs']} programs in {r['seconds']:.0f}s; {len(r['failures'])} distinct failures")
    for sig, n in r["failures"].items():
        print(f"  {n}x {sig}")
    return 1 if r["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
