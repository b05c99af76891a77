"""Drawing random programs (hypothesis strategy :func:`programs`): op families over tracked
values with shapes, dtypes and magnitudes."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy
from hypothesis import strategies as st

from ...shapes import INF, floordiv, interval, symbol
from .program import DIM_NAMES, LIMIT, Op, Program, dim_bounds, same_dim, same_shape, used_dims


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


def _bcast(a: tuple, b: tuple):
    """The broadcast shape, or None unless every aligned pair is equal or one is 1."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if same_dim(x, y):
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
        self.bounds = dim_bounds(dims)
        self.probe_dims = probe_dims            # symbol -> int
        self.vals: list[_Val] = []
        self.ops: list[Op] = []

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
            if len(b.shape) == 1 and same_dim(b.shape[0], k):
                partners.append(j)
            elif len(b.shape) >= 2 and same_dim(b.shape[-2], k) and \
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
            same = [j for j, v in enumerate(self.vals) if same_shape(v.shape, a.shape)]
            j = self.pick(same)
            ax = self.draw(st.integers(0, r))
            shape = a.shape[:ax] + (2,) + a.shape[ax:]
            return self.emit("stack", [i, j], f"xp.stack([{{0}}, {{1}}], axis={ax})", shape,
                             max(a.mag, self.vals[j].mag))
        ax = self.draw(st.integers(0, r - 1))
        partners = [j for j, v in enumerate(self.vals) if len(v.shape) == r and
                    all(same_dim(x, y) for k, (x, y) in enumerate(zip(v.shape, a.shape)) if k != ax)]
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
    dims = used_dims(dims, inputs)
    for shp, dt in inputs:
        probe_shape = tuple(g.ev(d) for d in shp)
        if dt == "bool":
            probe = rng.random(probe_shape) < 0.5
        elif dt.startswith("int"):
            probe = rng.integers(-8, 9, probe_shape).astype(dt)
        else:
            probe = rng.uniform(-4, 4, probe_shape).astype(dt)
        g.vals.append(_Val(shp, np.dtype(dt), 8.0, probe))
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
