"""``arrays_for``, ``check_against``, ``assert_shape_polymorphic`` (see the package docstring)."""
from __future__ import annotations

import hashlib
import inspect
import math
from typing import Callable

import numpy as np
import optree
from hypothesis import HealthCheck, note, reject
from hypothesis import given as _given
from hypothesis import settings as _settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ..backends import available_backends
from ..jit import Jitted, jit
from ..shapes import DEFAULT_BOUNDS, SymbolicDim, compile_dims, free_symbols, symbol
from ..structs import ShapeDtypeStruct

FLOAT_RANGE = 4.0
INT_RANGE = 8
_ENUMERATE_MAX = 4096


# ---------------------------------------------------------------------------------------
# Signatures
# ---------------------------------------------------------------------------------------

def _as_structs(shapes) -> list:
    if shapes is None:
        raise TypeError("shapes= is required: a sequence of rj.ShapeDtypeStruct or (shape, dtype)")
    if isinstance(shapes, ShapeDtypeStruct):
        shapes = [shapes]
    out = []
    for s in shapes:
        if isinstance(s, ShapeDtypeStruct):
            out.append(s)
        elif isinstance(s, (tuple, list)) and len(s) == 2 and isinstance(s[0], (tuple, list)):
            out.append(ShapeDtypeStruct(tuple(s[0]), s[1]))
        else:
            raise TypeError(f"shapes entries are rj.ShapeDtypeStruct or (shape, dtype) tuples, got {s!r}")
    return out


def _dim_key(k):
    if isinstance(k, SymbolicDim):
        if not k.expr.is_Symbol:
            raise TypeError(f"dims= keys are dims or dim names, got the expression {k}")
        return k.expr
    if isinstance(k, str):
        return symbol(k)
    raise TypeError(f"dims= keys are dims or dim names, got {k!r}")


class _Signature:
    """The free dims of a list of structs, their ranges, and the axes that constrain them."""

    def __init__(self, structs: list, dims: dict | None, min_side: int, max_side: int):
        self.structs = structs
        self.min_side, self.max_side = int(min_side), int(max_side)
        if self.max_side < max(self.min_side, 0):
            raise ValueError(f"max_side ({max_side}) < min_side ({min_side})")
        bounds: dict = {}
        for s in structs:                  # declared bounds (rj.dim) win over bare names
            for d in s.shape:
                if isinstance(d, SymbolicDim):
                    bounds.update(d.bounds)
        order, axes = [], []
        for leaf, s in enumerate(structs):
            for ax, d in enumerate(s.dims()):
                syms = sorted(free_symbols(d), key=lambda x: x.name)
                for x in syms:
                    if x not in order:
                        order.append(x)
                    bounds.setdefault(x, DEFAULT_BOUNDS)
                if syms:
                    axes.append((leaf, ax, d, syms, compile_dims([d], [x.name for x in syms])))
        self.bounds = bounds
        self.overrides = {_dim_key(k): v for k, v in (dims or {}).items()}
        for k in self.overrides:
            if k not in bounds:
                raise ValueError(f"dims= names {k.name}, which no shape uses "
                                 f"(dims: {', '.join(x.name for x in order) or 'none'})")
        # dims appearing alone on an axis first: they constrain the others best
        alone = {d for _, _, d, _, _ in axes if d.is_Symbol}
        self.order = sorted(order, key=lambda x: (x not in alone, order.index(x)))
        # the axes checked once each dim is drawn: all their dims known by then
        pos = {x: i for i, x in enumerate(self.order)}
        self.checks = {x: [] for x in self.order}
        for a in axes:
            last = max(a[3], key=lambda x: pos[x])
            self.checks[last].append(a)
        self.axis_lo = max(self.min_side, 0)
        # an axis is at most max_side, or what it is at the dims' smallest values when a
        # dim's own bounds (rj.dim(min=...)) force it above
        self.axis_hi = {}
        for a in axes:
            low = a[4](*[self.range_of(x)[0] for x in a[3]])[0]
            self.axis_hi[(a[0], a[1])] = max(self.max_side, low)

    def range_of(self, x) -> tuple:
        lo, hi = self.bounds[x]
        ov = self.overrides.get(x)
        if isinstance(ov, (int, np.integer)) and not isinstance(ov, bool):
            return int(ov), int(ov)
        if isinstance(ov, tuple):
            return int(ov[0]), int(ov[1])
        a, b = max(lo, self.min_side, 0), min(hi, self.max_side)
        if a > b:                                # the dim's own bounds win
            a = b = lo if lo > self.max_side else hi
        return int(a), int(b)

    def axis_ok(self, a, values: dict) -> bool:
        v = a[4](*[values[x] for x in a[3]])[0]
        return self.axis_lo <= v <= self.axis_hi[(a[0], a[1])]

    def draw_dims(self, draw) -> dict:
        values: dict = {}
        for x in self.order:
            ov = self.overrides.get(x)
            checks = self.checks[x]
            if isinstance(ov, st.SearchStrategy):
                values[x] = int(draw(ov))
                if not all(self.axis_ok(a, values) for a in checks):
                    reject()
                continue
            lo, hi = self.range_of(x)
            if hi - lo <= _ENUMERATE_MAX:
                feasible = []
                for v in range(lo, hi + 1):
                    values[x] = v
                    if all(self.axis_ok(a, values) for a in checks):
                        feasible.append(v)
                if not feasible:
                    values.pop(x)
                    reject()
                values[x] = draw(st.sampled_from(feasible))
            else:
                values[x] = draw(st.integers(lo, hi))
                if not all(self.axis_ok(a, values) for a in checks):
                    reject()
        return values

    def shapes_for(self, values: dict) -> list:
        out = []
        for s in self.structs:
            shape = []
            for d in s.dims():
                if isinstance(d, int):
                    shape.append(d)
                else:
                    syms = sorted(free_symbols(d), key=lambda x: x.name)
                    shape.append(int(compile_dims([d], [x.name for x in syms])(*[values[x] for x in syms])[0]))
            out.append(tuple(shape))
        return out


# ---------------------------------------------------------------------------------------
# Elements
# ---------------------------------------------------------------------------------------

def _dense(dtype: np.dtype, shape: tuple, seed: int, uniform: bool = True) -> np.ndarray:
    """Random values from ``seed``; floats uniform in the range, or (``uniform=False``, what
    shrinking goes to) small integers, exact in any float type."""
    rng = np.random.default_rng(seed)
    if dtype.kind in "fc" and not uniform:
        return rng.integers(-INT_RANGE // 2, INT_RANGE // 2 + 1, shape).astype(dtype)
    if dtype.kind == "f":
        return rng.uniform(-FLOAT_RANGE, FLOAT_RANGE, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(-INT_RANGE, int(info.min)), min(INT_RANGE, int(info.max)) + 1,
                            shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.uniform(-FLOAT_RANGE, FLOAT_RANGE, shape) +
                1j * rng.uniform(-FLOAT_RANGE, FLOAT_RANGE, shape)).astype(dtype)
    raise TypeError(f"arrays_for: no default elements for dtype {dtype}; pass elements=")


def _elements_for(elements, dtype: np.dtype):
    if elements is None:
        return None
    if isinstance(elements, st.SearchStrategy):
        return elements
    if isinstance(elements, dict):
        for k, v in elements.items():
            if np.dtype(k) == dtype:
                return v
        return None
    raise TypeError("elements= is a hypothesis strategy or a dict dtype -> strategy")


def arrays_for(shapes, dims: dict | None = None, min_side: int = 1, max_side: int = 64,
               elements=None, dtype=None, *, with_dims: bool = False) -> st.SearchStrategy:
    """A hypothesis strategy drawing NumPy inputs that satisfy a symbolic signature.

    ``shapes``: a sequence of :class:`relaxjax.ShapeDtypeStruct` (or ``(shape, dtype)``
    tuples) whose axes are ints, dims (``rj.dim``/``rj.dims``, or names) or expressions of
    dims (``n * 4``, ``n // 2``, ``n + k``).  One value is drawn per free dim, within the
    dim's bounds intersected with ``[min_side, max_side]``, such that every symbolic axis
    evaluates to a size in ``[max(min_side, 0), max_side]`` (so ``n // 2`` draws ``n >= 2``
    and ``n * 4`` draws ``n <= max_side // 4``).  ``dims`` fixes or narrows dims: a mapping
    from a dim (or its name) to an int, an ``(lo, hi)`` tuple or a strategy of ints.

    Elements: every element random (a drawn seed fills the array densely: hypothesis's own
    arrays repeat one fill value, which hides indexing bugs, and shrink slowly): floats
    uniform in [-4, 4], or small integers (what shrinking goes to), ints in [-8, 8]
    (clipped to the dtype), booleans.  ``elements`` (a hypothesis strategy, or a dict
    dtype -> strategy) draws them with ``hypothesis.extra.numpy.arrays`` instead; ``dtype``
    overrides every struct's dtype.

    Draws a tuple of arrays, or ``(arrays, {dim name: value})`` with ``with_dims=True``.
    """
    structs = _as_structs(shapes)
    if dtype is not None:
        structs = [ShapeDtypeStruct(s.shape, dtype) for s in structs]
    sig = _Signature(structs, dims, min_side, max_side)

    @st.composite
    def draw_inputs(draw):
        values = sig.draw_dims(draw)
        arrays = []
        for i, (s, shape) in enumerate(zip(structs, sig.shapes_for(values))):
            dt_ = np.dtype(s.dtype)
            el = _elements_for(elements, dt_)
            if el is not None:
                a = draw(hnp.arrays(dt_, shape, elements=el))
            else:
                a = _dense(dt_, shape, draw(st.integers(0, 2 ** 32 - 1)), draw(st.booleans()))
            arrays.append(a)
        arrays = tuple(arrays)
        if with_dims:
            return arrays, {x.name: v for x, v in values.items()}
        return arrays

    return draw_inputs()


# ---------------------------------------------------------------------------------------
# Comparing results
# ---------------------------------------------------------------------------------------

def default_tolerance(dtype) -> dict:
    """(rtol, atol) per result dtype; ``atol`` is scaled by the reference's largest
    magnitude (at least 1), so reassociated sums with cancellation still compare."""
    dtype = np.dtype(dtype)
    if dtype.kind in "fc":
        base = dtype.itemsize // (2 if dtype.kind == "c" else 1)
        if base <= 2:
            return dict(rtol=1e-2, atol=1e-2)
        if base <= 4:
            return dict(rtol=1e-4, atol=1e-5)
        return dict(rtol=1e-10, atol=1e-12)
    return dict(rtol=0, atol=0)


def assert_tree_close(got, want, rtol: float | None = None, atol: float | None = None) -> None:
    """Same pytree structure, and per leaf the same shape, dtype and close values (NaN
    equal to NaN; ints and bools exact); raises ``AssertionError`` naming the leaf."""
    g_leaves, g_tree = optree.tree_flatten(got, none_is_leaf=True)
    w_leaves, w_tree = optree.tree_flatten(want, none_is_leaf=True)
    if g_tree != w_tree:
        raise AssertionError(f"result structure {g_tree} != reference structure {w_tree}")
    paths = optree.tree_paths(want, none_is_leaf=True)
    for path, g, w in zip(paths, g_leaves, w_leaves):
        where = "result" + "".join(f"[{p!r}]" for p in path)
        if w is None or (isinstance(w, (bool, int, float, complex)) and not isinstance(w, np.generic)):
            if isinstance(w, float) and isinstance(g, float) and math.isclose(g, w, rel_tol=1e-12):
                continue
            if g != w or type(g) is not type(w):
                raise AssertionError(f"{where}: {g!r} != {w!r}")
            continue
        ga, wa = np.asarray(g), np.asarray(w)
        if ga.shape != wa.shape:
            raise AssertionError(f"{where}: shape {ga.shape} != reference shape {wa.shape}")
        if ga.dtype != wa.dtype:
            raise AssertionError(f"{where}: dtype {ga.dtype} != reference dtype {wa.dtype}")
        if wa.dtype.kind in "fc":
            tol = default_tolerance(wa.dtype)
            r = tol["rtol"] if rtol is None else rtol
            a = tol["atol"] if atol is None else atol
            finite = np.abs(wa[np.isfinite(wa)]) if wa.size else wa
            scale = max(1.0, float(finite.max())) if finite.size else 1.0
            try:
                np.testing.assert_allclose(ga, wa, rtol=r, atol=a * scale, equal_nan=True)
            except AssertionError as e:
                raise AssertionError(f"{where}: values differ (rtol={r}, atol={a}*{scale:g}){e}") from None
        else:
            try:
                np.testing.assert_array_equal(ga, wa)
            except AssertionError as e:
                raise AssertionError(f"{where}: values differ{e}") from None


# ---------------------------------------------------------------------------------------
# check_against / assert_shape_polymorphic
# ---------------------------------------------------------------------------------------

def _backends(backend) -> list:
    if backend is None:
        return [None]
    if backend == "all":
        return available_backends()
    if isinstance(backend, str):
        return [backend]
    return list(backend)


def _jit_opts(f) -> tuple[Callable, dict]:
    if isinstance(f, Jitted):
        return f.fun, dict(shapes=f.shapes, static_argnums=f.static_argnums,
                           static_argnames=f.static_argnames, pipeline=f.pipeline, backend=f.backend)
    if not callable(f):
        raise TypeError(f"expected a function or a rj.jit-decorated function, got {f!r}")
    return f, dict(backend="llvm")


def _make_jits(f, backend, structs, explicit: bool | None, fresh: bool = False) -> list:
    """[(label, jitted)] for each requested backend."""
    fun, opts = _jit_opts(f)
    out = []
    for b in _backends(backend):
        o = dict(opts)
        if b is not None:
            o["backend"] = b
        if explicit is True:
            o["shapes"] = tuple(structs)
        elif explicit is False:
            o["shapes"] = None
        if isinstance(f, Jitted) and not fresh and o == {**opts}:
            out.append((o["backend"], f))
        else:
            out.append((o["backend"], jit(fun, **o)))
    return out


def _arg_names(fun, n: int) -> list:
    try:
        ps = [p for p in inspect.signature(fun).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        names = [p.name for p in ps[:n]]
    except (TypeError, ValueError):
        names = []
    return names + [f"arg{i}" for i in range(len(names), n)]


def _describe(names, arrays, dims) -> str:
    shapes = ", ".join(f"{nm}: {a.dtype}{list(a.shape)}" for nm, a in zip(names, arrays))
    d = ", ".join(f"{k}={v}" for k, v in dims.items()) or "none"
    return f"shapes: {shapes}; dims: {d}"


def _run_reference(ref, arrays):
    with np.errstate(all="ignore"):
        return ref(*[np.array(a, copy=True) for a in arrays])


def _hyp_settings(max_examples, default_cap=None):
    n = max_examples if max_examples is not None else _settings.default.max_examples
    if max_examples is None and default_cap is not None:
        n = min(n, default_cap)
    return _settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck),
                     report_multiple_bugs=False)


def _digest(kind: str, fun, structs, extra="") -> bytes:
    src = f"{kind}|{getattr(fun, '__module__', '')}|{getattr(fun, '__qualname__', repr(fun))}|" \
          f"{[repr(s) for s in structs]}|{extra}"
    return hashlib.sha256(src.encode()).digest()


def _run_given(test, settings, digest):
    inner = getattr(getattr(test, "hypothesis", None), "inner_test", None)
    if inner is not None:                   # a database key per checked function
        inner._hypothesis_internal_add_digest = digest
    settings(test)()


def check_against(f, reference: Callable | None = None, shapes=None, *, backend=None,
                  rtol: float | None = None, atol: float | None = None,
                  max_examples: int | None = None, explicit: bool | None = None,
                  **arrays_for_kwargs) -> None:
    """Property test: jitted ``f`` agrees with ``reference`` on inputs drawn for ``shapes``.

    ``f`` is a function (jitted here, in automatic mode unless ``explicit=True``, which
    jits it with ``shapes=`` the signature) or a ``rj.jit``-decorated function (used as is).
    ``backend``: a backend name, a list of them, or ``"all"`` (jits per backend); the
    jitted functions are reused across examples, so later examples run entries traced for
    other sizes.  ``reference`` defaults to ``f``'s Python function run eagerly on NumPy.
    Results (pytrees) must match in structure, shape and dtype, and values within
    :func:`default_tolerance` (or ``rtol``/``atol``).  Runs its own hypothesis test
    (``max_examples`` defaults to the active profile's); a failure raises
    ``AssertionError`` naming the backend and the drawn shapes and dims, shrunk to the
    smallest failing ones.  Other keywords go to :func:`arrays_for`."""
    structs = _as_structs(shapes)
    fun, _ = _jit_opts(f)
    ref = reference if reference is not None else fun
    jits = _make_jits(f, backend, structs, explicit)
    names = _arg_names(fun, len(structs))
    strategy = arrays_for(structs, with_dims=True, **arrays_for_kwargs)

    @_given(strategy)
    def test(drawn):
        arrays, dims = drawn
        where = _describe(names, arrays, dims)
        note(where)
        want = _run_reference(ref, arrays)
        for label, g in jits:
            try:
                with np.errstate(all="ignore"):
                    got = g(*arrays)
            except Exception as e:
                raise AssertionError(f"{label} backend: {type(e).__name__}: {e}\n  for {where}") from e
            try:
                assert_tree_close(got, want, rtol, atol)
            except AssertionError as e:
                raise AssertionError(f"{label} backend differs from the reference for {where}\n  {e}") from None

    _run_given(test, _hyp_settings(max_examples), _digest("check_against", fun, structs, backend))


def _entry_guards(g: Jitted) -> str:
    try:
        out = []
        for entries in g._cache.values():
            for e in entries:
                gs = e.module.main.guards
                out.append("[" + ", ".join(str(x) for x in gs) + "]" if gs else "[no guards]")
        return "; ".join(out)
    except Exception:  # pragma: no cover - introspection only
        return "?"


def assert_shape_polymorphic(f, shapes, *, mode: str = "explicit", backend=None,
                             reference: Callable | None = None, rtol: float | None = None,
                             atol: float | None = None, n_shapes: int = 4,
                             max_examples: int | None = None, **arrays_for_kwargs) -> None:
    """Check that one compile serves every drawn shape.

    Each hypothesis example draws 2..``n_shapes`` distinct dim assignments for ``shapes``,
    jits ``f`` afresh (``mode="explicit"``: with ``shapes=`` the signature;
    ``mode="auto"``: automatic mode, where sizes 0 and 1 are specialized, so ``min_side``
    defaults to 2), calls it with each input set, checks every result against
    ``reference`` (default: ``f`` run eagerly on NumPy) and asserts that
    ``cache_info().compiles`` is 1 after every call.  Raises ``AssertionError`` (naming the
    shape sets and the guards of the entries) when a call compiles again, when the results
    differ, or when ``f`` cannot be traced for the signature.  ``max_examples`` defaults to
    at most 10 (each example compiles)."""
    if mode not in ("explicit", "auto"):
        raise ValueError(f"mode is 'explicit' or 'auto', got {mode!r}")
    structs = _as_structs(shapes)
    if mode == "auto":
        arrays_for_kwargs.setdefault("min_side", 2)
    fun, _ = _jit_opts(f)
    ref = reference if reference is not None else fun
    names = _arg_names(fun, len(structs))
    one = arrays_for(structs, with_dims=True, **arrays_for_kwargs)
    has_dims = bool(_Signature(structs, arrays_for_kwargs.get("dims"), arrays_for_kwargs.get("min_side", 1),
                               arrays_for_kwargs.get("max_side", 64)).order)
    sets = st.lists(one, min_size=2 if has_dims else 1, max_size=max(n_shapes, 2),
                    unique_by=lambda t: tuple(sorted(t[1].items())))

    @_given(sets)
    def test(drawn):
        jits = _make_jits(f, backend, structs, explicit=(mode == "explicit"), fresh=True)
        for label, g in jits:
            seen = []
            for arrays, dims in drawn:
                where = _describe(names, arrays, dims)
                seen.append(where)
                want = _run_reference(ref, arrays)
                try:
                    with np.errstate(all="ignore"):
                        got = g(*arrays)
                except Exception as e:
                    raise AssertionError(f"{label} backend ({mode} mode): {type(e).__name__}: {e}\n"
                                         f"  for {where}") from e
                c = g.cache_info().compiles
                if c > 1:
                    lst = "\n    ".join(seen)
                    raise AssertionError(
                        f"{label} backend ({mode} mode): not shape-polymorphic: {c} compiles for\n    "
                        f"{lst}\n  entry guards: {_entry_guards(g)}")
                try:
                    assert_tree_close(got, want, rtol, atol)
                except AssertionError as e:
                    raise AssertionError(f"{label} backend ({mode} mode) differs from the reference "
                                         f"for {where}\n  {e}") from None

    _run_given(test, _hyp_settings(max_examples, 10),
               _digest("assert_shape_polymorphic", fun, structs, f"{backend}{mode}"))
