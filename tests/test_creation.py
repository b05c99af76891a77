"""Array creation against NumPy, with static and symbolic (traced) sizes."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import BACKENDS, SMALL_SIZES, arrays, assert_same, check, check_reuse, shapes

S = rj.ShapeDtypeStruct


# fn(xp, x): sizes come from x.shape, so inside jit they are symbolic dims
CASES = [
    ("zeros", lambda xp, x: xp.zeros((x.shape[0], 3))),
    ("zeros_dim", lambda xp, x: xp.zeros(x.shape[0], dtype=np.int32)),
    ("zeros_shape", lambda xp, x: xp.zeros(x.shape, np.float32)),
    ("ones", lambda xp, x: xp.ones(x.shape)),
    ("ones_bool", lambda xp, x: xp.ones((2, x.shape[-1]), dtype=bool)),
    ("ones_expr", lambda xp, x: xp.ones((x.shape[0] * 2 + 1,), np.int8)),
    ("full_int", lambda xp, x: xp.full((2, x.shape[-1]), 7)),
    ("full_float", lambda xp, x: xp.full(x.shape, -2.5)),
    ("full_bool", lambda xp, x: xp.full((x.shape[0],), True)),
    ("full_dtype", lambda xp, x: xp.full((x.shape[0], 2), 3, dtype=np.float32)),
    ("full_array_value", lambda xp, x: xp.full((3, x.shape[0]), x.reshape(-1)[0])),
    ("full_broadcast_row", lambda xp, x: xp.full((4,) + x.shape, x)),
    ("zeros_like", lambda xp, x: xp.zeros_like(x)),
    ("ones_like_dtype", lambda xp, x: xp.ones_like(x, dtype=np.int32)),
    ("full_like", lambda xp, x: xp.full_like(x, 2.5)),
    ("full_like_int_truncates", lambda xp, x: xp.full_like(x.astype(np.int32), 2.5)),
    ("full_like_dtype", lambda xp, x: xp.full_like(x, 9, dtype=np.uint8)),
    ("empty_like_shape", lambda xp, x: xp.empty_like(x).shape),
    ("arange_n", lambda xp, x: xp.arange(x.shape[0])),
    ("arange_start_stop", lambda xp, x: xp.arange(1, x.shape[0] - 1)),
    ("arange_neg_step", lambda xp, x: xp.arange(x.shape[0], 0, -2)),
    ("arange_step3", lambda xp, x: xp.arange(2, x.shape[-1], 3)),
    ("arange_dtype", lambda xp, x: xp.arange(x.shape[0], dtype=np.int32)),
    ("arange_float_dtype", lambda xp, x: xp.arange(x.shape[0], dtype=np.float32)),
    ("arange_plus_x", lambda xp, x: x + xp.arange(x.shape[-1])),
    ("eye", lambda xp, x: xp.eye(x.shape[0])),
    ("eye_rect_k", lambda xp, x: xp.eye(x.shape[0], x.shape[-1], 1, dtype=np.int32)),
    ("eye_neg_k", lambda xp, x: xp.eye(x.shape[-1], k=-2, dtype=bool)),
    ("identity", lambda xp, x: xp.identity(x.shape[0])),
    ("tri", lambda xp, x: xp.tri(x.shape[0], x.shape[-1], -1)),
]


@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
@settings(max_examples=10)
@given(data=st.data())
def test_creation_with_traced_sizes(name, fn, data):
    x = data.draw(shapes(1, 2).flatmap(lambda s: arrays("float64", s)))
    check_reuse(name, lambda x: fn(rnp, x), lambda x: fn(np, x), x)


@settings(max_examples=30)
@given(start=st.integers(-20, 20), stop=st.one_of(st.none(), st.integers(-20, 20)),
       step=st.integers(-5, 5).filter(bool),
       dtype=st.sampled_from([None, "int32", "int64", "float32", "float64"]))
def test_arange_static(start, stop, step, dtype):
    args = (start,) if stop is None else (start, stop, step)
    assert_same(rnp.arange(*args, dtype=dtype), np.arange(*args, dtype=dtype))
    check(lambda x: rnp.arange(*args, dtype=dtype), lambda x: np.arange(*args, dtype=dtype), np.ones(2))


@settings(max_examples=30)
@given(start=st.floats(-10, 10, allow_nan=False), stop=st.floats(-10, 10, allow_nan=False),
       step=st.sampled_from([0.25, 0.5, 1.0, 1.5, -0.5, -1.25]))
def test_arange_float(start, stop, step):
    want = np.arange(start, stop, step)
    assert_same(rnp.arange(start, stop, step), want, rtol=1e-12, atol=1e-12)
    check(lambda x: rnp.arange(start, stop, step), lambda x: np.arange(start, stop, step), np.ones(2),
          rtol=1e-12, atol=1e-12)


@settings(max_examples=30)
@given(shape=shapes(0, 3), value=st.one_of(st.integers(-100, 100), st.floats(-1e3, 1e3, allow_nan=False),
                                           st.booleans()),
       dtype=st.sampled_from([None, "float32", "float64", "int32", "int64", "bool"]))
def test_full_zeros_ones_static(shape, value, dtype):
    assert_same(rnp.full(shape, value, dtype), np.full(shape, value, dtype))
    d = dtype or "float64"
    assert_same(rnp.zeros(shape, d), np.zeros(shape, d))
    assert_same(rnp.ones(shape, d), np.ones(shape, d))
    check(lambda: rnp.full(shape, value, dtype), lambda: np.full(shape, value, dtype))


@settings(max_examples=30)
@given(n=SMALL_SIZES, m=st.one_of(st.none(), SMALL_SIZES), k=st.integers(-45, 45),
       dtype=st.sampled_from(["float64", "float32", "int32", "bool"]))
def test_eye_tri_static(n, m, k, dtype):
    assert_same(rnp.eye(n, m, k, dtype=dtype), np.eye(n, m, k, dtype=dtype))
    assert_same(rnp.tri(n, m, k, dtype=dtype), np.tri(n, m, k, dtype=dtype))
    check(lambda: rnp.eye(n, m, k, dtype=dtype), lambda: np.eye(n, m, k, dtype=dtype))


@pytest.mark.parametrize("dtype", ["float64", "float32", "int8", "uint8", "bool"])
@settings(max_examples=10)
@given(data=st.data())
def test_like_functions(dtype, data):
    x = data.draw(shapes(0, 3).flatmap(lambda s: arrays(dtype, s)))
    for f in ("zeros_like", "ones_like"):
        check(lambda x: getattr(rnp, f)(x), lambda x: getattr(np, f)(x), x)
    check(lambda x: rnp.full_like(x, 1), lambda x: np.full_like(x, 1), x)
    check(lambda x: rnp.full_like(x, 3, dtype=np.float32), lambda x: np.full_like(x, 3, dtype=np.float32), x)


# -- IR-level shape rules -------------------------------------------------------------------------

n, m = rj.dims("n m")
IR_RULES = [
    ("arange", lambda x: rnp.arange(x.shape[0]), S((n,), "float32"), "-> i64[n]"),
    ("arange_offset", lambda x: rnp.arange(2, x.shape[0] + 2), S((n,), "float32"), "-> i64[n]"),
    ("arange_step", lambda x: rnp.arange(0, x.shape[0], 2), S((n,), "float32"), "-> i64[(n + 1) // 2]"),
    ("zeros", lambda x: rnp.zeros((x.shape[1], x.shape[0] + 1), np.float32), S((n, m), "float32"),
     "-> f32[m, n + 1]"),
    ("eye", lambda x: rnp.eye(x.shape[0], x.shape[1]), S((n, m), "float32"), "-> f64[n, m]"),
    ("full_like", lambda x: rnp.full_like(x, 1, dtype=np.int32), S((n, m), "float32"), "-> i32[n, m]"),
]


@pytest.mark.parametrize("name,fn,struct,text", IR_RULES, ids=[r[0] for r in IR_RULES])
def test_ir_creation_rules(name, fn, struct, text):
    assert text in str(rj.make_ir(fn, shapes=(struct,))(struct))


def test_arange_one_trace_for_all_sizes():
    f = rj.jit(lambda x: x * rnp.arange(x.shape[0]))
    for size in (2, 3, 17, 64):
        x = np.ones(size)
        assert_same(f(x), x * np.arange(size))
    assert f.cache_info().compiles == 1


ERRORS = [
    ("arange_zero_step", lambda: rnp.arange(0, 5, 0), ValueError),
    ("full_bad_shape", lambda: rnp.full((2, 3.5), 1), TypeError),
    ("full_overflow", lambda: rnp.full((2,), 300, dtype=np.int8), OverflowError),
]


@pytest.mark.parametrize("name,fn,exc", ERRORS, ids=[e[0] for e in ERRORS])
def test_creation_errors(name, fn, exc):
    with pytest.raises(exc):
        fn()


# --------------------------------------------------------------------------------------
# NumPy's own creation functions (np.zeros, not rnp.zeros) given symbolic dims in a trace
# --------------------------------------------------------------------------------------

NP_CREATION = [
    ("zeros", lambda x: x[0] + np.zeros(x.shape[1], x.dtype)),
    ("ones_tuple", lambda x: x + np.ones((1, x.shape[1]), x.dtype)),
    ("empty_shape", lambda x: np.full(np.empty((x.shape[0], 2)).shape, 2.0)),
    ("full", lambda x: np.full((x.shape[0], 2), 1.5) * x[:, :2]),
    ("eye", lambda x: np.eye(x.shape[1])[:2] * 2.0),
    ("eye_rect_k", lambda x: np.eye(x.shape[0], x.shape[1], k=1)),
    ("identity", lambda x: np.identity(x.shape[1]) @ x.T),
    ("arange", lambda x: np.arange(x.shape[0]) * 2),
    ("arange_expr", lambda x: np.arange(1, x.shape[0] + 1, dtype=np.float32)),
    ("linspace", lambda x: np.linspace(0.0, 1.0, x.shape[0])),
    ("tri", lambda x: np.tri(x.shape[1]) @ x.T),
    ("write_rows", lambda x: _write_rows(x)),
]


def _write_rows(x):
    """The NumPy pattern: an output made with np.zeros, written row by row."""
    out = np.zeros((x.shape[0], 2))
    out[:, 0] = x[:, 0]
    out[0, 1] = 3.0
    return out


@pytest.mark.parametrize("name, fn", NP_CREATION, ids=[c[0] for c in NP_CREATION])
def test_numpy_creation_functions_take_symbolic_dims_and_compile_once(name, fn):
    """``np.zeros(x.shape[1])`` and friends inside ``@rj.jit`` build traced arrays of
    symbolic shape: NumPy's results for every size, one compile (they used to pin the dim
    to each call's size), on every backend."""
    f = rj.jit(fn)
    rng = np.random.default_rng(1)
    for shape in ((2, 3), (5, 7), (17, 4), (64, 2)):
        x = rng.standard_normal(shape)
        assert_same(f(x), fn(x))
        for b in BACKENDS:
            assert_same(rj.jit(fn, backend=b)(x), fn(x))
    assert f.cache_info().compiles == 1


def test_numpy_creation_functions_are_numpys_own_outside_a_trace():
    """The wrappers exist only while a trace runs; concrete sizes inside a trace still give
    NumPy arrays (constants); another thread during a trace calls NumPy's function."""
    import threading
    originals = {n: getattr(np, n) for n in ("zeros", "ones", "eye", "arange", "linspace")}
    seen = {}
    started, release = threading.Event(), threading.Event()

    def other_thread():
        started.wait()
        seen["zeros"] = np.zeros(3)
        release.set()

    def f(x):
        started.set()
        release.wait(5)
        seen["inside"] = np.zeros(3)
        return x + np.zeros(x.shape[0])
    t = threading.Thread(target=other_thread)
    t.start()
    out = rj.jit(f)(np.ones(4))
    t.join()
    assert_same(out, np.ones(4))
    assert type(seen["zeros"]) is np.ndarray and type(seen["inside"]) is np.ndarray
    assert all(getattr(np, n) is f0 for n, f0 in originals.items())
