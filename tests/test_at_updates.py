"""Indexed updates against NumPy, the oracle: JAX's ``x.at[idx].set/add/...`` (computed with
NumPy's ``x[idx] = v`` and ``np.add.at``-style ufunc methods) and NumPy's own ``x[idx] = v`` /
``x[idx] += v`` run unchanged inside ``@rj.jit``, on every backend; the inputs are never
written."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.lax import fori_loop
from helpers import BACKENDS, SIZES, SMALL_SIZES, arrays, assert_same

PER_OP = settings(max_examples=25, deadline=None)

# .at method -> what it does to NumPy's x at an index (basic index: no duplicates)
BASIC = {
    "set": lambda cur, v: v,
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "power": np.power, "min": np.minimum, "max": np.maximum,
}
# .at method -> NumPy's unbuffered ufunc method (repeated indices apply each time)
UFUNC_AT = {"add": np.add.at, "subtract": np.subtract.at, "multiply": np.multiply.at,
            "divide": np.divide.at, "power": np.power.at, "min": np.minimum.at,
            "max": np.maximum.at}


def _set_at(x, idx, v):
    """NumPy's ``x[idx] = v`` with the last of repeated indices winning."""
    x[idx] = v


def _run(f, *args, backends=BACKENDS):
    """``f`` jitted on each backend; the arguments are left as they were."""
    before = [a.copy() for a in args]
    outs = [rj.jit(f, backend=b)(*args) for b in backends]
    for a, b in zip(args, before):
        assert_same(a, b)
    return outs


@st.composite
def basic_index(draw, shape):
    """Ints, slices (any start/stop, steps of either sign), None and ``...`` for ``shape``."""
    idx = []
    for d in shape:
        kind = draw(st.sampled_from(["int", "slice", "slice", "all"]))
        if kind == "int":
            idx.append(draw(st.integers(-d, d - 1)))
        elif kind == "slice":
            bound = st.one_of(st.none(), st.integers(-d - 2, d + 2))
            idx.append(slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, 3, -1, -2]))))
        else:
            idx.append(slice(None))
    if draw(st.booleans()):
        idx.insert(draw(st.integers(0, len(idx))), None)
    if draw(st.booleans()):              # an ellipsis stands for a run of whole axes
        k = draw(st.integers(0, len(idx)))
        j = draw(st.integers(k, len(idx)))
        if all(v == slice(None) for v in idx[k:j]):
            idx[k:j] = [Ellipsis]
    return tuple(idx)


@given(shape=st.lists(SMALL_SIZES, min_size=1, max_size=3).map(tuple), data=st.data())
@PER_OP
def test_basic_index_every_method(shape, data):
    method = data.draw(st.sampled_from(sorted(BASIC)), label="method")
    idx = data.draw(basic_index(shape), label="idx")
    x = data.draw(arrays("float64", shape, 0.5, 3.0), label="x")
    target = x[idx].shape
    vshape = data.draw(st.sampled_from([target, target[1:], ()]), label="value shape")
    v = data.draw(arrays("float64", vshape, -2.0, 2.0), label="v")
    want = x.copy()
    want[idx] = BASIC[method](want[idx], v)

    def f(x, v):
        return getattr(x.at[idx], method)(v)
    for got in _run(f, x, v):
        assert_same(got, want, rtol=1e-12, atol=1e-12)


@given(shape=st.lists(SIZES, min_size=1, max_size=2).map(tuple), data=st.data())
@PER_OP
def test_index_array_every_method_accumulates_duplicates(shape, data):
    """An integer array at any axis position (repeated, negative and out-of-range entries,
    which ``.at`` drops), other axes sliced or fixed."""
    method = data.draw(st.sampled_from(["set"] + sorted(UFUNC_AT)), label="method")
    axis = data.draw(st.integers(0, len(shape) - 1), label="axis")
    d = shape[axis]
    k = data.draw(st.integers(1, 12), label="count")
    i = np.array(data.draw(st.lists(st.integers(-d - 2, d + 2), min_size=k, max_size=k)), np.int64)
    other = tuple(slice(None) if a == axis else data.draw(st.sampled_from([slice(None), slice(1, None), 0]))
                  for a in range(len(shape)))
    if any(o == slice(1, None) and n == 1 for o, n in zip(other, shape)):
        other = tuple(slice(None) if o == slice(1, None) else o for o in other)
    x = data.draw(arrays("float64", shape, 0.5, 2.0), label="x")
    idx = other[:axis] + (i,) + other[axis + 1:]
    keep = (i >= -d) & (i < d)
    kept_idx = other[:axis] + (i[keep],) + other[axis + 1:]
    vshape = x[other[:axis] + (np.clip(i, -d, d - 1),) + other[axis + 1:]].shape
    v = data.draw(arrays("float64", vshape, 0.5, 1.5), label="v")
    # NumPy: the values for the kept indices (the same broadcasting of the advanced dims)
    vk = np.take(v, np.flatnonzero(keep), axis=_adv_axis(idx))
    want = x.copy()
    if method == "set":
        _set_at(want, kept_idx, vk)
    else:
        UFUNC_AT[method](want, kept_idx, vk)

    def f(x, i, v):
        return getattr(x.at[other[:axis] + (i,) + other[axis + 1:]], method)(v)
    for got in _run(f, x, i, v):
        assert_same(got, want, rtol=1e-9, atol=1e-12)


def _adv_axis(idx) -> int:
    """Where NumPy puts the index array's dim in ``x[idx]`` (ints are advanced indices too:
    when they are not next to the array, the array's dim goes first)."""
    adv = [k for k, v in enumerate(idx) if not isinstance(v, slice)]
    if adv[-1] - adv[0] + 1 != len(adv):
        return 0
    pos = next(k for k, v in enumerate(idx) if isinstance(v, np.ndarray))
    return sum(isinstance(v, slice) for v in idx[:pos])


@given(n=SIZES, data=st.data())
@PER_OP
def test_numpy_assignment_runs_unchanged(n, data):
    """The same NumPy code, jitted: ``x[i] += v`` with repeated indices applies once per
    index (NumPy's buffered read, add, assign), slices with symbolic bounds, masks."""
    x = data.draw(arrays("float64", (n, 3)), label="x")
    i = np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=6)), np.int64)
    v = data.draw(arrays("float64", (len(i), 3)), label="v")

    def f(x, i, v):
        x[i] = v
        x[i] += v
        x[1:x.shape[0] - 1, ::-2] *= 2.0
        x[..., 0] = x[:, 1] + 1.0
        x[x > 5.0] = 5.0
        x[0] -= 1
        return x
    want = f(x.copy(), i, v)
    for got in _run(f, x, i, v):
        assert_same(got, want)


def test_one_compile_for_symbolic_bounds():
    def f(x):
        x = x.at[1:x.shape[0] - 1].set(0.0)
        return x.at[: x.shape[0] // 2].add(1.0).at[::-3].multiply(-1.0)
    g = rj.jit(f)
    for n in (2, 3, 7, 31, 100):
        x = np.arange(n, dtype=np.float64)
        want = x.copy()
        want[1:n - 1] = 0.0
        want[: n // 2] += 1.0
        want[::-3] *= -1.0
        assert_same(g(x), want)
    assert g.cache_info().compiles == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_masks(backend):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 4))
    row = rng.standard_normal(4)

    def f(x, row):
        m = x[:, 0] > 0
        return (x.at[x > 0].set(0.0), x.at[m].add(row), x.at[m].max(row), x.at[x < 0].get(),
                x.at[m].set(x[m] * 2.0))
    want = []
    for fill in (lambda w: w.__setitem__(x > 0, 0.0), lambda w: w.__setitem__(x[:, 0] > 0, w[x[:, 0] > 0] + row),
                 lambda w: w.__setitem__(x[:, 0] > 0, np.maximum(w[x[:, 0] > 0], row))):
        w = x.copy()
        fill(w)
        want.append(w)
    want.append(x[x < 0])
    w = x.copy()
    w[x[:, 0] > 0] = x[x[:, 0] > 0] * 2.0
    want.append(w)
    (got,) = _run(f, x, row, backends=[backend])
    assert_same(got, tuple(want))


def test_integer_dtypes_and_casts():
    """The value is cast to x's dtype (NumPy's assignment, JAX's .at); bools or/and."""
    x = np.arange(10, dtype=np.int32)
    b = np.zeros(5, bool)

    def f(x, b):
        x[2] = 7.9                                    # truncated, as NumPy
        y = x.at[np.array([1, 1, 3])].add(2)
        c = b.at[np.array([0, 0, 4])].add(True)       # np.add.at on bools: or
        return x, y, c
    for got in _run(f, x, b):
        w = x.copy()
        w[2] = 7.9
        y = w.copy()
        np.add.at(y, [1, 1, 3], 2)
        c = b.copy()
        np.add.at(c, [0, 0, 4], True)
        assert_same(got, (w, y, c))


def test_histogram_on_a_fresh_constant():
    """JAX's idiom: zeros of a concrete size inside @jit is traced, so .at works."""
    def hist(i):
        return rnp.zeros(8).at[i].add(1.0), rnp.arange(5).at[-1].set(0)
    i = np.array([0, 3, 3, 7, 3, 9, -1])
    for got in _run(hist, i):
        h = np.zeros(8)
        np.add.at(h, i[i < 8], 1.0)
        assert_same(got, (h, np.array([0, 1, 2, 3, 0])))


def test_time_loop_and_aliases():
    """A loop updating its array; ``y = x`` is the same array (NumPy's aliasing), while
    ``copy``, ``astype`` and ``array`` are new ones."""
    def f(x):
        y = x
        for t in range(1, 4):
            x[t] = x[t - 1] * 2.0 + x[t]
        c, a, r = x.copy(), x.astype(x.dtype), rnp.array(x)
        c[0], a[0], r[0] = -1.0, -2.0, -3.0
        y += 1.0
        return x, y, c, a, r
    x = np.arange(6.0)
    want = f(x.copy())
    for got in _run(f, x):
        assert_same(got, want)


def test_writing_through_a_view_is_an_error():
    x = np.ones((3, 4))
    for write in (lambda x: x[0].__setitem__(1, 5.0), lambda x: x.T.__setitem__(0, 5.0),
                  lambda x: x.reshape(4, 3).__setitem__(0, 5.0), lambda x: x[None].__setitem__(0, 5.0)):
        def f(x):
            view = None
            write(x)
            return view
        with pytest.raises(ValueError, match=r"writing into a view .* f64\[x0, x1\] that is still alive"):
            rj.jit(f)(x)
    with pytest.raises(ValueError, match="row = x\\[i\\].copy\\(\\)"):
        rj.jit(_row_write)(x)
    # the view of a temporary, or of a copy, may be written
    assert_same(rj.jit(lambda x: _write_row((x * 2.0)[0]))(x), np.array([9.0, 2, 2, 2]))
    assert_same(rj.jit(lambda x: _write_row(x[0].copy()))(x), np.array([9.0, 1, 1, 1]))


@pytest.mark.parametrize("op", ["+=", "-=", "*=", "/="])
def test_augmented_assignment_through_a_view(op):
    """``row = x[i]; row += v`` changes ``x`` in NumPy: using ``x`` afterwards is an error
    that says so; ``x[i] += v`` (which Python stores back) and a view whose base is not used
    again give NumPy's results."""
    x = np.arange(12.0).reshape(3, 4) + 1.0

    def aug(a, b):
        ns = {"a": a, "b": b}
        exec(f"a {op} b", ns)                   # noqa: S102 (the operator under test)
        return ns["a"]

    def store_back(x):
        x[1] = aug(x[1], 2.0)                   # what x[1] op= 2.0 does
        return x

    def view_only(x):
        row = x[2]
        return aug(row, 2.0)

    def base_used(x):
        row = x[2]
        row = aug(row, 2.0)
        return x.sum() + row

    want = x.copy()
    want[1] = aug(want[1], 2.0)
    for b in BACKENDS:
        assert_same(rj.jit(store_back, backend=b)(x), want)
        assert_same(rj.jit(view_only, backend=b)(x), aug(x[2].copy(), 2.0))
        with pytest.raises(ValueError, match=r"used after an in-place .* wrote into a view of it"):
            rj.jit(base_used, backend=b)(x)


def _row_write(x):
    row = x[1]
    row[0] = 1.0
    return x


def _write_row(r):
    r[0] = 9.0
    return r


def test_errors_name_what_is_wrong():
    x = np.ones((3, 4))
    with pytest.raises(IndexError, match="integer .*float64"):
        rj.jit(lambda x: x.at[np.array([0.5])].set(1.0))(x)
    with pytest.raises(rj.ShapeError, match=r"value of shape \(5,\) cannot be broadcast to the "
                                            r"indexed shape \(x0 - 1, x1\)"):
        rj.jit(lambda x: x.at[1:].set(np.ones(5)))(x)
    with pytest.raises(rj.ShapeError, match=r"x\[\.\.\.\] = value: the value of shape \(3,\)"):
        rj.jit(lambda x: x.__setitem__(np.array([0, 1]), np.ones(3)))(x)
    with pytest.raises(IndexError, match="index 3 is out of bounds"):
        rj.jit(lambda x: x.at[3].set(1.0), shapes=[rj.ShapeDtypeStruct((3, 4), "float64")])(x)
    with pytest.raises(ValueError, match="mode must be one of"):
        rj.jit(lambda x: x.at[0].set(1.0, mode="wrap"))(x)
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output from float64 to int64"):
        rj.jit(lambda i: i.__iadd__(1.5))(np.arange(3))
    # NumPy's assignment: an index array out of range is an IndexError when the program runs
    for b in BACKENDS:
        f = rj.jit(_assign_at, backend=b)
        assert_same(f(np.zeros(4), np.array([1, -4])), np.array([1.0, 1, 0, 0]))
        with pytest.raises(IndexError, match="out of bounds"):
            f(np.zeros(4), np.array([1, 4]))


def _assign_at(x, i):
    x[i] = 1.0
    return x


def test_drop_and_clip_modes():
    x = np.zeros(5)
    i = np.array([-7, -1, 2, 5, 9])
    for got in _run(lambda x, i: (x.at[i].add(1.0), x.at[i].add(1.0, mode="clip")), x, i):
        assert_same(got, (np.array([0, 0, 1.0, 0, 1]), np.array([1.0, 0, 1, 0, 3])))


def test_lowering():
    """A slice update is one fused pass; a scatter a copy then a serial loop."""
    low = rj.jit(lambda x, i: (x.at[1:].set(0.0) * 2.0, x.at[i].add(1.0))).lower(
        rj.ShapeDtypeStruct(("n",), "float32"), rj.ShapeDtypeStruct(("k",), "int64"))
    text = low.as_text("loops")
    assert "fused_update_slice_mul" in text
    scatter = text[text.index("def scatter"):]
    assert "\n  for s0 in range(k):" in scatter and "out[j] = out[j] + " in scatter


def _update_storages(f, *structs):
    """Per update binding (update_slice / scatter programs) of ``f``'s lowered function:
    whether its output shares its updated operand's storage."""
    exe = rj.jit(f).lower(*structs).compile()._entry.executable
    plan = exe.memory_plan
    out = []
    for b in exe.fn.bindings:
        if b.kind == "tir" and ("update_slice" in b.callee.name or "scatter" in b.callee.name):
            x, v = b.args[0], b.outvars[0]
            out.append(v in plan.storage_of and plan.storage_of.get(x) is plan.storage_of[v])
    return out, plan


def test_updates_of_dead_arrays_are_in_place():
    """A chain of updates is one pass or writes into its array, however many steps; an
    array still used after an update is not overwritten."""
    n = rj.dim("n", min=8)

    def loop(x, i, steps):
        # (each new value reads another array: an update whose value reads the array it
        # updates at other places fuses with that computation into one pass instead)
        y, w = x * 2.0, rnp.sqrt(x)
        for t in range(1, steps):
            y = y.at[t].set(w[t - 1] * 0.5 + w[t])
        y = y.at[i].add(1.0)
        return rnp.exp(y)
    S = rj.ShapeDtypeStruct
    structs = (S((n,), "float32"), S(("k",), "int64"))
    for steps in (3, 7):
        shared, plan = _update_storages(lambda x, i: loop(x, i, steps), *structs)
        # the slice updates fuse with y's computation into one pass (a new array, since x
        # is the caller's); the scatter then writes that pass's array in place
        assert shared == [False, True], shared
        assert sum("n" in str(st.size) for st in plan.storages) == 1     # one array-sized
    x, i = np.arange(9, dtype=np.float32), np.array([0, 8, 8, -1])
    want, w = x * 2.0, np.sqrt(x)
    for t in range(1, 7):
        want[t] = w[t - 1] * 0.5 + w[t]
    np.add.at(want, i, 1.0)
    for got in _run(lambda x, i: loop(x, i, 7), x, i):
        assert_same(got, np.exp(want))

    def keeps(x):
        y = rnp.sort(x)
        z = rnp.sort(y.at[0].set(9.0))
        return z + y
    shared, _ = _update_storages(keeps, S((n,), "float32"))
    assert shared == [False]
    for got in _run(keeps, np.arange(8, dtype=np.float32)):
        assert_same(got, np.array([1.0, 3, 5, 7, 9, 11, 13, 16], np.float32))


@given(shape=st.tuples(SMALL_SIZES, SMALL_SIZES, SMALL_SIZES), data=st.data())
@settings(max_examples=10, deadline=None)
def test_several_traced_scalar_indices(shape, data):
    """x[i, j] and x[i, j] = v with traced integer scalars (a loop's indices): a dynamic
    window at those axes, negative indices counting from the end as in NumPy."""
    x = data.draw(arrays("float64", shape), label="x")
    i = data.draw(st.integers(-shape[0], shape[0] - 1), label="i")
    j = data.draw(st.integers(-shape[1], shape[1] - 1), label="j")

    def f(x, i, j):
        a = x[i, j] * 2.0 + x[i, j, 1:].sum()
        x[i, j, 0] = a[0]
        x[i, j] += 1.0
        return a, x
    y = x.copy()
    a = y[i, j] * 2.0 + y[i, j, 1:].sum()
    y[i, j, 0] = a[0]
    y[i, j] += 1.0
    for b in BACKENDS:
        assert_same(rj.jit(f, backend=b)(x, np.int64(i), np.int64(j)), (a, y))


def test_ufunc_at_on_traced_arrays():
    """np.add.at(x, i, v) (unbuffered: repeated indices accumulate) rebinds a traced x; a
    NumPy array updated with traced indices is a TypeError saying to make it traced."""
    def f(x, i, v):
        np.add.at(x, i, v)
        y = rnp.zeros(4)
        np.maximum.at(y, i % 4, v)
        return x, y
    x, i, v = np.zeros(5), np.array([0, 1, 1, 4, 4, 4]), np.arange(6.0)
    xr, yr = x.copy(), np.zeros(4)
    np.add.at(xr, i, v)
    np.maximum.at(yr, i % 4, v)
    for b in BACKENDS:
        assert_same(rj.jit(f, backend=b)(x, i, v), (xr, yr))
    assert not x.any()                                  # the caller's array is untouched
    with pytest.raises(TypeError, match="NumPy array .* cannot hold traced values"):
        rj.jit(lambda i, v: np.add.at(np.zeros(5), i, v))(i, v)


# --------------------------------------------------------------------------------------
# One traced integer among slices (a loop's row index): the row first, then the window
# --------------------------------------------------------------------------------------

@given(n=st.integers(3, 40), m=st.integers(3, 40), i=st.integers(-45, 45),
       mode=st.sampled_from(["numpy", None, "clip"]))
@settings(max_examples=40, deadline=None)
def test_row_index_with_slices_reads_and_updates_one_row(n, m, i, mode):
    """``x[j, 1:-1]`` and ``x[i, 1:-1] = v`` / ``x.at[i, 1:-1].add(v)`` with traced ``i``,
    ``j``: NumPy's result (IndexError out of range) or JAX's (dropped, or clipped with
    mode="clip"); the programs read and write one row, never a copy of the whole window."""
    x = np.arange(n * m, dtype=np.float64).reshape(n, m)
    v = np.linspace(-1.0, 1.0, m - 2)

    def f(x, i):
        y = x[i % x.shape[0], 1:-1] * 2.0 + v
        if mode == "numpy":
            x[i, 1:-1] = y
            return x
        return x.at[i, 1:-1].add(y, mode=mode)
    y = x[i % n, 1:-1] * 2.0 + v
    inside = -n <= i < n
    want = x.copy()
    if mode == "numpy":
        if inside:
            want[i, 1:-1] = y
    elif inside or mode == "clip":
        want[min(max(i + n if i < 0 else i, 0), n - 1), 1:-1] += y
    for b in BACKENDS:
        g = rj.jit(f, backend=b)
        if mode == "numpy" and not inside:
            with pytest.raises(IndexError, match="out of bounds"):
                g(x, np.int64(i))
        else:
            assert_same(g(x, np.int64(i)), want)
    text = rj.jit(f).lower(x, np.int64(0)).compile().as_text("optimized")
    assert "f64[x0, x1 - 2]" not in text, "a copy of the whole window:\n" + text


@given(n=st.one_of(st.sampled_from([1, 2, 7, 64]), st.integers(1, 3000)), steps=st.integers(0, 40),
       seed=st.integers(0, 2 ** 16))
@settings(max_examples=20, deadline=None)
def test_loop_of_updates_in_place_matches_numpy(n, steps, seed):
    """``x.at[i].set(...)`` carried through a fori_loop writes into the carry's own buffer
    after the first step (native loops: one buffer, the update's copy skipped): every step's
    update lands, the caller's array is untouched, and carries read after their update in
    the same step (not updatable in place) stay right."""
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    keep = x.copy()

    def one(i, c):
        return c.at[i % n].set(c[i % n] * 2.0 + 1.0)

    def two(i, c):
        a, b = c
        a2 = a.at[i % n].add(1.0)
        return a2, b * 0.5 + a          # reads a after a's update: a is not updated in place

    f, g = rj.jit(lambda x, s: fori_loop(0, s, one, x)), rj.jit(lambda x, y, s: fori_loop(0, s, two, (x, y)))
    want_x = x.copy()
    want_a, want_b = x.copy(), y.copy()
    for i in range(steps):
        want_x[i % n] = want_x[i % n] * 2.0 + 1.0
        want_a, want_b = want_a.copy(), want_b * 0.5 + want_a
        want_a[i % n] += 1.0
    np.testing.assert_allclose(f(x, steps), want_x, rtol=1e-12)
    a, b = g(x, y, steps)
    np.testing.assert_allclose(a, want_a, rtol=1e-12)
    np.testing.assert_allclose(b, want_b, rtol=1e-12)
    np.testing.assert_array_equal(x, keep)
