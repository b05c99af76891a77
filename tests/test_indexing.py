"""Indexing against NumPy: ints, slices (static and symbolic bounds), None/Ellipsis, gathers,
boolean masks and nonzero."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import BACKENDS, SIZES, SMALL_SIZES, arrays, assert_same, check, check_reuse, shapes, xs

S = rj.ShapeDtypeStruct



# fixed index expressions; each runs on tracers and on NumPy arrays alike
BASIC = [
    ("int_0", 1, lambda x: x[0]),
    ("int_-1", 1, lambda x: x[-1]),
    ("int_last_axis", 2, lambda x: x[..., -1]),
    ("int_int", 2, lambda x: x[0, -1]),
    ("reverse", 1, lambda x: x[::-1]),
    ("reverse_step2", 1, lambda x: x[::-2]),
    ("5:1:-2", 1, lambda x: x[5:1:-2]),
    ("-3:", 1, lambda x: x[-3:]),
    (":-3", 1, lambda x: x[:-3]),
    (":100", 1, lambda x: x[:100]),
    ("-100:", 1, lambda x: x[-100:]),
    ("100:", 1, lambda x: x[100:]),
    ("1::3", 1, lambda x: x[1::3]),
    ("10::-1", 1, lambda x: x[10::-1]),
    (":-10:-1", 1, lambda x: x[:-10:-1]),
    ("-2:-100:-3", 1, lambda x: x[-2:-100:-3]),
    ("axis1_reverse", 2, lambda x: x[:, ::-1]),
    ("mixed", 2, lambda x: x[1:, ::-2]),
    ("newaxis", 1, lambda x: x[None]),
    ("newaxis_mid", 2, lambda x: x[:, None, :, None]),
    ("newaxis_int_ellipsis", 2, lambda x: x[None, 0, ..., None]),
    ("ellipsis", 1, lambda x: x[...]),
    ("ellipsis_front", 2, lambda x: x[..., 1:]),
    ("ellipsis_mid", 3, lambda x: x[0, ..., ::-1]),
    ("sym_trim", 1, lambda x: x[1:x.shape[0] - 1]),
    ("sym_half", 1, lambda x: x[:x.shape[0] // 2]),
    ("sym_second_half", 1, lambda x: x[x.shape[0] // 2:]),
    ("sym_neg_step", 1, lambda x: x[x.shape[0] - 1:0:-1]),
    ("sym_last_axis", 2, lambda x: x[:, :x.shape[1] - 1]),
    ("sym_int_index", 1, lambda x: x[x.shape[0] - 1]),
    ("sym_int_half", 1, lambda x: x[x.shape[0] // 2]),
]


@pytest.mark.parametrize("name,nd,fn", BASIC, ids=[b[0] for b in BASIC])
@settings(max_examples=10)
@given(data=st.data())
def test_basic_indexing(name, nd, fn, data):
    x = data.draw(xs(nd, 3))
    check_reuse(name, fn, fn, x)


@settings(max_examples=40)
@given(data=st.data())
def test_random_static_slices(data):
    x = data.draw(xs(1, 2, sizes=SIZES))
    n = x.shape[0]
    bound = st.one_of(st.none(), st.integers(-n - 3, n + 3))
    sl = slice(data.draw(bound), data.draw(bound), data.draw(st.one_of(st.none(), st.integers(-4, 4).filter(bool))))
    i = data.draw(st.integers(-n, n - 1))
    j = data.draw(st.integers(-x.shape[-1], x.shape[-1] - 1))
    idx = (sl, j) if x.ndim == 2 and data.draw(st.booleans()) else sl
    check(lambda x: x[idx], lambda x: x[idx], x)
    check(lambda x: x[i], lambda x: x[i], x)


_MULTI_SLICE = rj.jit(lambda x: (x[::-1], x[5:1:-2], x[-3:], x[:100], x[1:-1],
                                 x[1:x.shape[0] - 1], x[:x.shape[0] // 2]))


@settings(max_examples=15)
@given(data=st.data())
def test_slices_share_one_trace(data):
    """One jitted function serves every size >= 2 (the bounds are symbolic)."""
    x = data.draw(xs(1, 1, sizes=st.integers(2, 60)))
    f = _MULTI_SLICE
    assert_same(f(x), (x[::-1], x[5:1:-2], x[-3:], x[:100], x[1:-1], x[1:-1], x[:x.shape[0] // 2]))
    assert f.cache_info().compiles == 1


# -- integer-array gathers --------------------------------------------------------------------

def _gather_case(data, nd_lo=1):
    x = data.draw(xs(nd_lo, 3))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    n = x.shape[axis]
    ishape = data.draw(shapes(0, 2))
    idx = data.draw(arrays(data.draw(st.sampled_from(["int64", "int32", "uint8"])), ishape,
                           lo=-n, hi=n - 1).filter(lambda a: a.dtype.kind == "i" or True))
    if idx.dtype.kind == "u":
        idx = np.clip(idx, 0, n - 1).astype(idx.dtype)
    return x, axis, idx


@settings(max_examples=30)
@given(data=st.data())
def test_gather_getitem(data):
    x, axis, idx = _gather_case(data)
    ax = axis % x.ndim
    key = (slice(None),) * ax + (idx,)
    check(lambda x, i: x[(slice(None),) * ax + (i,)], lambda x, i: x[(slice(None),) * ax + (i,)], x, idx)
    check(lambda x: x[key], lambda x: x[key], x)                       # constant index array
    if x.ndim >= 2 and ax >= 1:
        key2 = (-1,) + (slice(None),) * (ax - 1) + (idx,)
        check(lambda x: x[key2], lambda x: x[key2], x)                 # int before the array
        key3 = (slice(None, None, -1),) + (slice(None),) * (ax - 1) + (idx, Ellipsis)
        check(lambda x: x[key3], lambda x: x[key3], x)


def test_gather_list_and_newaxis():
    x = np.arange(24.0).reshape(2, 3, 4)
    for key in ([0, -1, 1], (None, slice(None), [2, 0]), (Ellipsis, [3, -4, 0]), (0, [1, 1, 2])):
        check(lambda x: x[key], lambda x: x[key], x)


@settings(max_examples=30)
@given(data=st.data())
def test_take(data):
    x, axis, idx = _gather_case(data)
    check(lambda x, i: rnp.take(x, i, axis=axis), lambda x, i: np.take(x, i, axis=axis), x, idx)
    flat = data.draw(arrays("int64", data.draw(shapes(0, 2)), lo=-x.size, hi=x.size - 1))
    check(lambda x, i: rnp.take(x, i), lambda x, i: np.take(x, i), x, flat)
    check(lambda x, i: x.take(i, axis=axis), lambda x, i: x.take(i, axis=axis), x, idx)


@settings(max_examples=30)
@given(data=st.data())
def test_take_along_axis(data):
    x = data.draw(xs(1, 3))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    n = x.shape[axis]
    ishape = list(x.shape)
    ishape[axis] = data.draw(SMALL_SIZES)
    for i in range(x.ndim):                      # other axes may broadcast from 1
        if i != axis % x.ndim and data.draw(st.booleans()):
            ishape[i] = 1
    idx = data.draw(arrays("int64", tuple(ishape), lo=-n, hi=n - 1))
    check(lambda x, i: rnp.take_along_axis(x, i, axis=axis), lambda x, i: np.take_along_axis(x, i, axis=axis),
          x, idx)
    check(lambda x: rnp.take_along_axis(x, rnp.argsort(x, axis=axis), axis=axis)
          if hasattr(rnp, "argsort") else rnp.take_along_axis(x, idx, axis=axis),
          lambda x: np.take_along_axis(x, np.argsort(x, axis=axis), axis=axis)
          if hasattr(rnp, "argsort") else np.take_along_axis(x, idx, axis=axis), x)
    flat = data.draw(arrays("int64", (data.draw(SMALL_SIZES),), lo=-x.size, hi=x.size - 1))
    check(lambda x, i: rnp.take_along_axis(x, i, axis=None), lambda x, i: np.take_along_axis(x, i, axis=None),
          x, flat)


# -- boolean masks and nonzero ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float64", "int32", "bool"])
@settings(max_examples=20)
@given(data=st.data())
def test_boolean_mask(dtype, data):
    x = data.draw(xs(1, 3, dtype))
    k = data.draw(st.integers(1, x.ndim))
    mask = data.draw(arrays("bool", x.shape[:k]))
    check(lambda x, m: x[m], lambda x, m: x[m], x, mask)
    check(lambda x: x[x > 0], lambda x: x[x > 0], x)
    check(lambda x: x[x[(Ellipsis,) + (0,) * (x.ndim - k)] != 0] if x.ndim > k else x[x != 0],
          lambda x: x[x[(Ellipsis,) + (0,) * (x.ndim - k)] != 0] if x.ndim > k else x[x != 0], x)


@settings(max_examples=20)
@given(data=st.data())
def test_nonzero_where_argwhere(data):
    x = data.draw(xs(1, 3, data.draw(st.sampled_from(["float64", "int8", "bool"]))))
    check(lambda x: rnp.nonzero(x), lambda x: np.nonzero(x), x)
    check(lambda x: rnp.nonzero(x > 0), lambda x: np.nonzero(x > 0), x)
    check(lambda x: rnp.where(x > 0), lambda x: np.where(x > 0), x)
    check(lambda x: rnp.argwhere(x), lambda x: np.argwhere(x), x)
    # data-dependent size followed by more work on the result
    check(lambda x: rnp.sum(x[x > 0]) if x.dtype != bool else x[x].shape[0] * 1,
          lambda x: np.sum(x[x > 0]) if x.dtype != bool else x[x].shape[0] * 1, x)


def test_mask_ir_has_fresh_dim():
    n, m = rj.dims("n m")
    ir = str(rj.make_ir(lambda x: x[x > 0], shapes=(S((n, m), "float32"),))(S((n, m), "float32")))
    assert "boolean_mask" in ir and "-> f32[nz0]" in ir
    ir = str(rj.make_ir(lambda x: rnp.nonzero(x), shapes=(S((n, m), "float32"),))(S((n, m), "float32")))
    assert "-> (i64[nz0], i64[nz0])" in ir


# -- shape rules at the IR level --------------------------------------------------------------

n, m = rj.dims("n m")
n2 = rj.dim("n2", min=2)
IR_RULES = [
    ("trim_bounded", lambda x: x[1:x.shape[0] - 1], S((n2,), "float32"), "-> f32[n2 - 2]"),
    ("trim_unbounded", lambda x: x[1:x.shape[0] - 1], S((n,), "float32"), "-> f32[max(0, n - 2)]"),
    ("half", lambda x: x[:x.shape[0] // 2], S((n,), "float32"), "-> f32[n // 2]"),
    ("reverse_step2", lambda x: x[::-2], S((n,), "float32"), "-> f32[(n + 1) // 2]"),
    ("last3", lambda x: x[-3:], S((n,), "float32"), "-> f32[min(3, n)]"),
    ("clamped_stop", lambda x: x[:100], S((n,), "float32"), "-> f32[min(100, n)]"),
    ("drop_first", lambda x: x[1:], S((n,), "float32"), "-> f32[n - 1]"),
    ("int_last", lambda x: x[-1], S((n, m), "float32"), "-> f32[m]"),
    ("int_and_slice", lambda x: x[0, 1:], S((n, m), "float32"), "-> f32[m - 1]"),
    ("newaxis", lambda x: x[:, None], S((n, m), "float32"), "-> f32[n, 1, m]"),
    ("gather", lambda x: x[:, np.array([0, 0, 0])], S((n, m), "float32"), "-> f32[n, 3]"),
    ("take_along", lambda x: rnp.take_along_axis(x, rnp.zeros((x.shape[0], 1), dtype=np.int64), axis=1),
     S((n, m), "float32"), "-> f32[n, 1]"),
]


@pytest.mark.parametrize("name,fn,struct,text", IR_RULES, ids=[r[0] for r in IR_RULES])
def test_ir_index_rules(name, fn, struct, text):
    assert text in str(rj.make_ir(fn, shapes=(struct,))(struct))


# -- errors -------------------------------------------------------------------------------------

ERRORS = [
    ("int_out_of_bounds", 7, IndexError),
    ("neg_out_of_bounds", -8, IndexError),
    ("too_many", (0, 0, 0), IndexError),
    ("two_ellipses", (Ellipsis, Ellipsis), IndexError),
    ("two_int_arrays_out_of_bounds", (np.array([0]), np.array([4])), IndexError),
    ("two_int_arrays_unbroadcastable", (np.array([0, 1]), np.array([0, 1, 2])), IndexError),
    ("mask_with_more", (np.ones(7, bool), 0), IndexError),                # unsupported, clearly
    ("float_index_array", np.array([0.0]), IndexError),
    ("zero_step", slice(None, None, 0), ValueError),
    ("string_index", "a", IndexError),
    ("mask_shape", np.ones((3,), bool), rj.ShapeError),
]


@pytest.mark.parametrize("name,key,exc", ERRORS, ids=[e[0] for e in ERRORS])
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_index_errors(name, key, exc, mode):
    x = np.arange(28.0).reshape(7, 4)
    with pytest.raises(exc):
        if mode == "eager":
            rnp._indexing.getitem(x, key)
        else:
            rj.jit(lambda x: x[key])(x)


def test_int_index_guard_retraces():
    """x[5] on automatic shapes: in bounds for size 7, IndexError for size 3 (a guard, not a
    run-time crash), and back in bounds for size 9 reusing the first entry."""
    f = rj.jit(lambda x: x[5])
    assert_same(f(np.arange(7.0)), np.float64(5.0))
    with pytest.raises(IndexError):
        f(np.arange(3.0))
    assert_same(f(np.arange(9.0)), np.float64(5.0))
    g = rj.jit(lambda x: x[-5])
    assert_same(g(np.arange(7.0)), np.float64(2.0))
    with pytest.raises(IndexError):
        g(np.arange(4.0))
    assert_same(g(np.arange(8.0)), np.float64(3.0))


def test_symbolic_index_needs_known_sign():
    n = rj.dim("n")
    with pytest.raises(rj.InconclusiveDimensionError):
        rj.make_ir(lambda x: x[5], shapes=(S((n,), "float32"),))(S((n,), "float32"))
    with pytest.raises(rj.InconclusiveDimensionError):
        rj.make_ir(lambda x: x[x.shape[0] - 3:], shapes=(S((n,), "float32"),))(S((n,), "float32"))
    # a bound that is provably in range is fine
    big = rj.dim("big", min=6)
    ir = str(rj.make_ir(lambda x: x[5], shapes=(S((big,), "float32"),))(S((big,), "float32")))
    assert "-> f32[]" in ir


@pytest.mark.parametrize("sl", [slice(0, -1, -1), slice(None, -1, -1), slice(0, -2, -1), slice(-1, 0, -1),
                                slice(1, None, -2), slice(2, 0, -1)])
def test_negative_step_slices_empty_at_small_sizes(sl):
    """A negative-step slice that is empty at some sizes (x[0:-1:-1] at n = 1) traces in
    automatic mode, reads and updates as NumPy at every size (found by hypothesis in CI)."""
    for n in (1, 2, 3, 7):
        x = np.arange(float(n))
        assert_same(rj.jit(lambda x: x[sl])(x), x[sl])
        want = x.copy()
        want[sl] += 1.0
        assert_same(rj.jit(lambda x: x.at[sl].add(1.0))(x), want)


@st.composite
def _several_arrays(draw):
    """An array shape and an index with two or three integer arrays (broadcasting against
    each other), ints, full or partial slices and None, as NumPy takes it."""
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 5, 7]), min_size=2, max_size=4)))
    idx, arrays, length = [], 0, draw(st.sampled_from([2, 3]))
    for d in shape:
        kind = draw(st.sampled_from(["array", "array", "int", "slice", "all"]))
        if kind == "array" and arrays < 3:
            n = draw(st.sampled_from([1, length]))
            idx.append(np.array(draw(st.lists(st.integers(-d, d - 1), min_size=n, max_size=n))))
            arrays += 1
        elif kind == "int":
            idx.append(draw(st.integers(-d, d - 1)))
        elif kind == "slice":
            idx.append(slice(draw(st.sampled_from([None, 1, -1])), None, draw(st.sampled_from([None, 2, -1]))))
        else:
            idx.append(slice(None))
    if arrays < 2:
        idx[0], idx[1] = np.array([0, shape[0] - 1][:length] + [0] * (length - 2)), np.array([-1])
    if draw(st.booleans()):
        idx.insert(draw(st.integers(0, len(idx))), None)
    return shape, tuple(idx)


@given(case=_several_arrays(), seed=st.integers(0, 99))
@settings(max_examples=60, deadline=None)
def test_several_integer_array_indices_as_numpy(case, seed):
    """``x[rows, cols]``, ``logits[arange(n), labels]``, arrays beside ints, slices and None,
    adjacent or not (their result dims in place, else first): NumPy's values and shape on
    every backend, the index arrays traced; and ``x.at[rows, cols].set/add`` where the
    other axes are whole, duplicates accumulating as ``np.add.at``."""
    shape, idx = case
    x = np.random.default_rng(seed).standard_normal(shape)
    arrays = [i for i, v in enumerate(idx) if isinstance(v, np.ndarray)]

    def rebuilt(given):
        it = iter(given)
        return tuple(next(it) if isinstance(v, np.ndarray) else v for v in idx)
    want = x[idx]
    for b in BACKENDS:
        got = rj.jit(lambda x, *ind: x[rebuilt(ind)], backend=b)(x, *[idx[i] for i in arrays])
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    if any(v is None or (isinstance(v, slice) and v != slice(None)) for v in idx):
        return
    added = x.copy()
    np.add.at(added, idx, 1.5)
    put = x.copy()
    put[idx] = -7.0
    for b in BACKENDS:
        f = rj.jit(lambda x, *ind: (x.at[rebuilt(ind)].add(1.5), x.at[rebuilt(ind)].set(-7.0)), backend=b)
        got_add, got_set = f(x, *[idx[i] for i in arrays])
        np.testing.assert_allclose(got_add, added, rtol=1e-14, atol=1e-14)
        np.testing.assert_array_equal(got_set, put)


def test_several_integer_array_indices_out_of_range_raise():
    """A component out of its own axis's range is an IndexError, never another element
    (the merged position would otherwise land in range); ``.at[]`` drops it (JAX's mode)."""
    x = np.arange(12.0).reshape(3, 4)
    for b in BACKENDS:
        f = rj.jit(lambda x, r, c: x[r, c], backend=b)
        np.testing.assert_array_equal(f(x, np.array([0, 2]), np.array([3, -4])), x[[0, 2], [3, -4]])
        for r, c in (([0, 1], [4, 0]), ([0, 1], [-5, 0]), ([3, 0], [0, 0])):
            with pytest.raises(IndexError):
                f(x, np.array(r), np.array(c))
    # constant index arrays: checked when tracing, NumPy's message naming the axis
    for (r, c), msg in ((([0, 1], [4, 0]), "index 4 is out of bounds for axis 1"),
                        (([0, 3], [0, 0]), "index 3 is out of bounds for axis 0"),
                        (([0], [-5]), "index -5 is out of bounds for axis 1")):
        with pytest.raises(IndexError, match=msg):
            rj.jit(lambda x: x[np.array(r), np.array(c)])(x)
    dropped = rj.jit(lambda x: x.at[np.array([0, 5]), np.array([1, 1])].set(-1.0))(x)
    np.testing.assert_array_equal(dropped, np.where(np.arange(12).reshape(3, 4) == 1, -1.0, x))
    with pytest.raises(IndexError, match="several integer-array indices beside slices"):
        rj.jit(lambda x: x.at[np.array([0]), 1:, np.array([1])].set(0.0))(np.zeros((2, 3, 4)))
