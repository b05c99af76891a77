"""Structured control flow (rj.lax.fori_loop, while_loop, scan, map, cond, switch) against
plain NumPy loops, on every backend: symbolic and traced trip counts, carries of symbolic
shape, captured values, nesting, one compile across sizes, and precise errors."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax import lax
from helpers import BACKENDS, SIZES, SMALL_SIZES, arrays, assert_same, tolerance

PER_TEST = settings(max_examples=8, deadline=None)


def _jacobi_numpy(a, steps):
    a = a.copy()
    for _ in range(steps):
        b = a.copy()
        b[1:-1] = (a[:-2] + a[1:-1] + a[2:]) / 3.0
        a = b
    return a


def _jacobi(a, steps):
    def body(t, a):
        return rnp.concatenate([a[:1], (a[:-2] + a[1:-1] + a[2:]) / 3.0, a[-1:]])
    return lax.fori_loop(0, steps, body, a)


@given(n=SIZES.filter(lambda n: n >= 2), steps=st.integers(0, 12), dtype=st.sampled_from(["float32", "float64"]),
       data=st.data())
@PER_TEST
def test_fori_loop_stencil_with_traced_trip_count(n, steps, dtype, data):
    a = data.draw(arrays(dtype, (n,)), label="a")
    want = _jacobi_numpy(a, steps)
    for b in BACKENDS:
        got = rj.jit(_jacobi, backend=b)(a, np.int64(steps))
        assert_same(got, want, **tolerance(dtype))
    assert_same(_jacobi(a, steps), want, **tolerance(dtype))          # eagerly: a Python loop


def test_fori_loop_compiles_once_across_sizes_and_trip_counts():
    f = rj.jit(_jacobi)
    for n, steps in [(2, 0), (3, 5), (97, 1), (1024, 9), (5, 3)]:
        a = np.random.default_rng(n).standard_normal(n)
        assert_same(f(a, np.int64(steps)), _jacobi_numpy(a, steps), **tolerance("float64"))
    assert f.cache_info().compiles == 1


def test_fori_loop_explicit_shapes_need_the_proof():
    """The stencil keeps its carry's length only for n >= 2: explicit mode must be told."""
    sig = lambda n: (rj.ShapeDtypeStruct((n,), "float64"), rj.ShapeDtypeStruct((), "int64"))
    f = rj.jit(_jacobi, shapes=sig(rj.dim("n", min=2)))
    a = np.arange(7.0)
    assert_same(f(a, np.int64(4)), _jacobi_numpy(a, 4))
    with pytest.raises(rj.InconclusiveDimensionError, match="fori_loop's body's carry"):
        rj.jit(_jacobi, shapes=sig(rj.dim("m")))(a, np.int64(4))


@given(shape=st.tuples(SMALL_SIZES, SMALL_SIZES), data=st.data())
@PER_TEST
def test_fori_loop_dim_trip_count_index_and_captures(shape, data):
    """The trip count is a dim, the body indexes with the loop index and reads arrays of
    the enclosing function (captured), and the carry is a pytree with a Python scalar."""
    x = data.draw(arrays("float64", shape), label="x")
    w = data.draw(arrays("float64", shape[1:]), label="w")

    def f(x, w):
        scale = w * 2.0

        def body(i, c):
            return {"acc": c["acc"] + x[i] * scale, "count": c["count"] + i}
        return lax.fori_loop(0, x.shape[0], body, {"acc": rnp.zeros_like(w), "count": 0})

    acc, count = np.zeros_like(w), 0
    for i in range(shape[0]):
        acc, count = acc + x[i] * (w * 2.0), count + i
    for b in BACKENDS:
        got = rj.jit(f, backend=b)(x, w)
        assert_same(got["acc"], acc, rtol=1e-12, atol=1e-9)
        assert int(got["count"]) == count


@given(n=SMALL_SIZES, data=st.data())
@PER_TEST
def test_nested_loops_with_a_trip_count_from_the_outer_index(n, data):
    x = data.draw(arrays("float64", (n,)), label="x")

    def f(x):
        def outer(i, c):
            return lax.fori_loop(0, i + 1, lambda j, d: d + x[j] * (i + 1), c)
        return lax.fori_loop(0, x.shape[0], outer, 0.0)

    want = sum(x[j] * (i + 1) for i in range(n) for j in range(i + 1))
    for b in BACKENDS:
        got = rj.jit(f, backend=b)(x)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)


@given(n=SMALL_SIZES, data=st.data())
@PER_TEST
def test_while_loop_data_dependent_termination(n, data):
    """Halve until the sum drops below 1, counting the steps: the trip count is data."""
    x = data.draw(arrays("float64", (n,), lo=0.0, hi=1e6), label="x")

    def f(x):
        return lax.while_loop(lambda c: c[0].sum() >= 1.0, lambda c: (c[0] * 0.5, c[1] + 1), (x, 0))

    y, k = x, 0
    while y.sum() >= 1.0:
        y, k = y * 0.5, k + 1
    for b in BACKENDS:
        got_y, got_k = rj.jit(f, backend=b)(x)
        assert_same(got_y, y)
        assert int(got_k) == k
    assert_same(f(x)[0], y)


@given(shape=st.tuples(SMALL_SIZES, SMALL_SIZES), reverse=st.booleans(), data=st.data())
@PER_TEST
def test_scan_stacks_outputs_and_runs_in_reverse(shape, reverse, data):
    xs = data.draw(arrays("float32", shape), label="xs")
    ws = data.draw(arrays("float32", shape[:1]), label="ws")

    def f(xs, ws):
        def step(c, x):
            row, w = x["row"], x["w"]
            c = c * 0.5 + row * w
            return c, (c.sum(), c * 2.0)
        return lax.scan(step, rnp.zeros(xs.shape[1], xs.dtype), {"row": xs, "w": ws}, reverse=reverse)

    c = np.zeros(shape[1], np.float32)
    sums, twice = [None] * shape[0], [None] * shape[0]
    for t in (range(shape[0] - 1, -1, -1) if reverse else range(shape[0])):
        c = c * np.float32(0.5) + xs[t] * ws[t]
        sums[t], twice[t] = c.sum(), c * np.float32(2.0)
    want = (c, (np.array(sums, np.float32), np.stack(twice)))
    tol = dict(rtol=1e-4, atol=1e-3)
    for b in BACKENDS:
        assert_same(rj.jit(f, backend=b)(xs, ws), want, **tol)
    assert_same(f(xs, ws), want, **tol)


def test_scan_with_length_only_and_map():
    def f(x):
        carry, ys = lax.scan(lambda c, _: (c * 2.0, c + x), x, None, length=4)
        return carry, ys, lax.map(lambda r: (r * r).sum(), ys)
    x = np.arange(3.0)
    ys = np.stack([x * 2.0 ** t + x for t in range(4)])
    want = (x * 16.0, ys, (ys * ys).sum(axis=1))
    for b in BACKENDS:
        assert_same(rj.jit(f, backend=b)(x), want)
    assert_same(f(x), want)


@given(n=SMALL_SIZES, data=st.data())
@PER_TEST
def test_cond_and_switch_run_the_chosen_branch(n, data):
    x = data.draw(arrays("float64", (n,)), label="x")
    k = data.draw(st.integers(-2, 5), label="k")

    def f(x, k):
        w = x[::-1]
        a = lax.cond(x.sum() > 0, lambda v: v * 2.0 + w, lambda v: v - 1, x)
        s = lax.switch(k, [lambda v: v + 1.0, lambda v: v * v, lambda v: -v], x)
        return a, s

    a = x * 2.0 + x[::-1] if x.sum() > 0 else x - 1
    s = [x + 1.0, x * x, -x][min(max(k, 0), 2)]
    for b in BACKENDS:
        assert_same(rj.jit(f, backend=b)(x, np.int64(k)), (a, s))
    assert_same(f(x, k), (a, s))


def test_cond_promotes_a_weak_branch_and_takes_python_predicates():
    def f(x):
        return lax.cond(x[0] > 0, lambda v: v.sum(), lambda v: 0.0, x)
    for b in BACKENDS:
        got = rj.jit(f, backend=b)(np.array([1.0, 2.0], np.float32))
        assert got.dtype == np.float32 and got == 3.0
        assert rj.jit(f, backend=b)(np.array([-1.0, 2.0], np.float32)) == 0.0
    # a Python predicate picks its branch while tracing: no cond in the IR
    g = rj.jit(lambda x: lax.cond(x.shape[0] > 2, lambda v: v + 1.0, lambda v: v - 1.0, x))
    assert_same(g(np.zeros(3)), np.ones(3))
    assert "cond" not in g.lower(np.zeros(3)).as_text()


def test_region_with_a_data_dependent_dim_and_a_matmul():
    """A body may bind dims of its own (a boolean mask) and call BLAS."""
    def f(x, w):
        def body(i, c):
            h = rnp.tanh(c @ w)
            return h + h[h > 0].sum() * 1e-3
        return lax.fori_loop(0, 3, body, x)
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((5, 4)), rng.standard_normal((4, 4))
    want = x
    for _ in range(3):
        h = np.tanh(want @ w)
        want = h + h[h > 0].sum() * 1e-3
    for b in BACKENDS:
        assert_same(rj.jit(f, backend=b)(x, w), want, rtol=1e-10, atol=1e-10)


def test_carry_dtype_rules():
    # a weak Python scalar takes the body's dtype; a safe cast widens like NumPy's rebinding
    f = rj.jit(lambda x: lax.fori_loop(0, 3, lambda i, c: c + x.sum(), 0.0))
    assert f(np.ones(2, np.float32)).dtype == np.float32
    g = rj.jit(lambda x: lax.fori_loop(0, 2, lambda i, c: c + 0.5, x))
    assert g(np.int64(1)) == 2.0 and g(np.int64(1)).dtype == np.float64
    with pytest.raises(TypeError, match="dtype int32 where the carry has float64"):
        rj.jit(lambda x: lax.fori_loop(0, 3, lambda i, c: c.astype(np.int32), x))(np.ones(3))


def test_errors_name_what_is_wrong():
    x = np.ones(3)
    with pytest.raises(rj.ShapeError, match=r"carry .* axis 0: x0 \+ 1 where the carry has x0"):
        rj.jit(lambda x: lax.fori_loop(0, 2, lambda i, c: rnp.concatenate([c, c[:1]]), x))(x)
    with pytest.raises(TypeError, match="returned a carry of structure"):
        rj.jit(lambda x: lax.fori_loop(0, 2, lambda i, c: (c, c), x))(x)
    with pytest.raises(TypeError, match="cond must return a boolean scalar, got f64"):
        rj.jit(lambda x: lax.while_loop(lambda c: c, lambda c: c, x))(x)
    with pytest.raises(rj.ShapeError, match="the true branch's result"):
        rj.jit(lambda x: lax.cond(x.sum() > 0, lambda a: a, lambda a: a[1:], x))(x)
    with pytest.raises(TypeError, match="different structures"):
        rj.jit(lambda x: lax.cond(x.sum() > 0, lambda a: (a, a), lambda a: a, x))(x)
    with pytest.raises(rj.ShapeError, match="scan: xs .* has leading axis"):
        rj.jit(lambda x, y: lax.scan(lambda c, v: (c, v), 0.0, (x, y)))(x, np.ones(4))
    with pytest.raises(TypeError, match="must be an integer scalar"):
        rj.jit(lambda x: lax.fori_loop(0, x.sum(), lambda i, c: c, x))(x)
    with pytest.raises(TypeError, match="pair"):
        rj.jit(lambda x: lax.scan(lambda c, v: c, 0.0, x))(x)


def test_ir_prints_regions_inline_and_pickles():
    low = rj.jit(_jacobi).lower(rj.ShapeDtypeStruct((rj.dim("n", min=2),), "float32"),
                                rj.ShapeDtypeStruct((), "int64"))
    text = low.as_text()
    assert "b: f32[n] = fori_loop(0, steps, a, body=@fori_body, n_carry=1)" in text
    assert "    def fori_body(p0: i64[], p1: f32[n]) -> f32[n]:" in text
    assert "call_tir" in low.as_text("optimized")          # the body was lowered
    again = pickle.loads(pickle.dumps(low.module))             # the persistent cache stores it
    assert str(again) == str(low.module)


def _native_plans(jitted, *args):
    exe = jitted.lower(*args).compile()._entry.executable
    return [r.native for r in exe.control.values()]


@pytest.mark.parametrize("steps", [0, 1, 2, 3, 4, 7])
def test_llvm_runs_a_one_segment_fori_body_natively(steps):
    """A body that compiled to one native segment runs the whole loop in one native call,
    double-buffering its carries: every trip-count parity gives NumPy's answer, a carry
    passed through unchanged stays the caller's, and the inputs are never written."""
    def f(x, w, k):
        def body(i, c):
            a, b, keep = c
            return rnp.tanh(a @ w) + b * 0.5 + i, a - b, keep
        return lax.fori_loop(0, k, body, (x, x * 2.0, w))
    rng = np.random.default_rng(steps)
    x, w = rng.standard_normal((6, 4)), rng.standard_normal((4, 4))
    x0, w0 = x.copy(), w.copy()
    a, b = x, x * 2.0
    for i in range(steps):
        a, b = np.tanh(a @ w) + b * 0.5 + i, a - b
    jf = rj.jit(f)
    assert all(p is not None for p in _native_plans(jf, x, w, np.int64(steps)))
    got = jf(x, w, np.int64(steps))
    assert_same(got[:2], (a, b), rtol=1e-12, atol=1e-12)
    assert_same(got[2], w)
    assert np.array_equal(x, x0) and np.array_equal(w, w0)


@pytest.mark.parametrize("length", [0, 1, 2, 3, 5, 8])
@pytest.mark.parametrize("reverse", [False, True])
def test_llvm_runs_a_one_segment_scan_body_natively(length, reverse):
    """A scan body that compiled to one native segment runs in one native call: each
    iteration's slices of xs are copied in and its outputs copied out into the stacked ys,
    for an output that is the new carry itself, the incoming carry, a slice of xs or a
    value of its own; every length parity and direction gives NumPy's answer."""
    def f(xs, zs, w):
        def step(c, x):
            row, z = x
            new = c * 0.5 + row * z + w
            return new, (new, c, row, (new * new).sum())
        return lax.scan(step, rnp.ones(xs.shape[1]), (xs, zs), reverse=reverse)
    rng = np.random.default_rng(length)
    xs, zs, w = rng.standard_normal((length, 3)), rng.standard_normal(length), rng.standard_normal(3)
    x0 = xs.copy()
    c, outs = np.ones(3), [[None] * length for _ in range(4)]
    for t in (range(length - 1, -1, -1) if reverse else range(length)):
        new = c * 0.5 + xs[t] * zs[t] + w
        outs[0][t], outs[1][t], outs[2][t], outs[3][t] = new, c, xs[t], (new * new).sum()
        c = new
    want = (c, tuple(np.array(o).reshape((length,) + ((3,) if k < 3 else ())) for k, o in enumerate(outs)))
    jf = rj.jit(f)
    assert all(p is not None for p in _native_plans(jf, xs, zs, w))
    assert_same(jf(xs, zs, w), want, rtol=1e-12, atol=1e-12)
    assert np.array_equal(xs, x0)


@pytest.mark.parametrize("limit", [0.5, 1.0, 2.0, 3.5, 6.0, 40.0])
def test_llvm_runs_a_one_segment_while_loop_natively(limit):
    """A while_loop whose cond and body each compiled to one native segment runs in one
    native call: the cond reads the carries the body reads next, every iteration-count
    parity (none included) gives NumPy's answer, a carry passed through unchanged stays
    the caller's, and the caller's arrays are not written."""
    def f(x, w, lim):
        def cond(c):
            a, k, keep = c
            return (a * keep).sum() < lim
        def body(c):
            a, k, keep = c
            return a + w, k + 1, keep
        return lax.while_loop(cond, body, (x, 0, w))
    x, w = np.array([0.25, 0.5]), np.array([0.5, 1.0])
    x0, w0 = x.copy(), w.copy()
    a, k = x, 0
    while (a * w).sum() < limit:
        a, k = a + w, k + 1
    jf = rj.jit(f)
    assert all(p is not None for p in _native_plans(jf, x, w, limit))
    got = jf(x, w, limit)
    assert_same(got[0], a)
    assert int(got[1]) == k
    assert_same(got[2], w)
    assert np.array_equal(x, x0) and np.array_equal(w, w0)


def test_native_loop_errors_name_the_index():
    """A gather index out of range inside a natively run loop (its cond or its body)
    raises NumPy's IndexError, not a crash."""
    idx = np.array([0, 5])
    x = np.arange(3.0)
    f = rj.jit(lambda x, i: lax.while_loop(lambda c: c[i].sum() < 100.0, lambda c: c + 1.0, x))
    with pytest.raises(IndexError, match="out of bounds"):
        f(x, idx)
    g = rj.jit(lambda x, i: lax.fori_loop(0, 3, lambda j, c: c + c[i].sum(), x))
    with pytest.raises(IndexError, match="out of bounds"):
        g(x, idx)


def test_bodies_with_host_steps_use_the_host_driver():
    """A body with a host operation between kernels (a boolean mask binds a dim) cannot run
    as one native call: it takes the host driver, with the same results."""
    f = rj.jit(lambda x: lax.fori_loop(0, 3, lambda i, c: c + c[c > 0].sum(), x))
    x = np.array([1.0, -2.0, 3.0])
    assert _native_plans(f, x) == [None]
    want = x
    for _ in range(3):
        want = want + want[want > 0].sum()
    assert_same(f(x), want)


@given(n=st.integers(2, 40), steps=st.integers(0, 6), data=st.data())
@PER_TEST
def test_numpy_assignment_inside_a_loop_body(n, steps, data):
    """NPBench's jacobi-2d as a NumPy user writes it, x[1:-1, 1:-1] = ..., inside a
    fori_loop: each half-step fuses into one loop over the updated array, and the caller's
    arrays are not written."""
    a, b = data.draw(arrays("float64", (n, n)), label="a"), data.draw(arrays("float64", (n, n)), label="b")

    def kernel(A, B, T):
        def body(t, c):
            A, B = c
            B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
            A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
            return A, B
        return lax.fori_loop(0, T, body, (A, B))

    A, B = a.copy(), b.copy()
    for _ in range(steps):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
    a0, b0 = a.copy(), b.copy()
    for backend in BACKENDS:
        assert_same(rj.jit(kernel, backend=backend)(a, b, np.int64(steps)), (A, B), rtol=1e-12, atol=1e-12)
    assert np.array_equal(a, a0) and np.array_equal(b, b0)


def test_writing_an_enclosing_array_inside_a_body_is_an_error():
    def f(x, w):
        def body(i, c):
            w[0] = c.sum()
            return c + w
        return lax.fori_loop(0, 2, body, x)
    with pytest.raises(ValueError, match="array of the enclosing function .* inside a loop body"):
        rj.jit(f)(np.ones(3), np.ones(3))
    text = rj.jit(lambda A: lax.fori_loop(0, 3, lambda t, A: A.at[1:-1].set(A[:-2] + A[2:]), A)) \
        .lower(np.zeros(8)).as_text("optimized").split("@tir")[0]
    assert text.count("call_tir(") == 1, text


def test_gather_indices_are_checked_natively_inside_a_native_loop():
    """x[i + t] with a traced index is checked in the segment itself, so such a body still
    runs as one native call, and an index out of range is NumPy's IndexError."""
    f = rj.jit(lambda x, i: lax.fori_loop(0, 3, lambda t, c: c + x[i + t] * (t + 1), 0.0))
    x = np.arange(5.0)
    assert all(p is not None for p in _native_plans(f, x, np.int64(1)))
    assert f(x, np.int64(1)) == 1.0 + 2 * 2.0 + 3 * 3.0
    assert f(x, np.int64(-5)) == 0.0 + 2 * 1.0 + 3 * 2.0           # negative: from the end
    with pytest.raises(IndexError, match="out of bounds"):
        f(x, np.int64(3))
