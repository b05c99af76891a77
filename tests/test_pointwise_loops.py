"""A ``fori_loop`` whose body updates each point of its carries from that point alone runs as
one program taking cache-sized tiles of points through every step (``compile.pointwise_loops``,
LLVM backend): NumPy's plain loop is the oracle on every backend over drawn shapes (1, primes,
sizes that are not multiples of a tile) and trip counts (zero, traced, a start above the
stop); the printed program shows the tiled loop only where the body is pointwise."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import relaxjax as rj
from relaxjax.lax import fori_loop

from helpers import BACKENDS, SIZES


def mandel(c, lo, hi):
    """Escape time with the escaped points frozen: complex carries split into re/im pairs."""
    def step(i, s):
        z, z_out, n, alive = s
        z = np.where(alive, z * z + c, z)
        esc = alive & (np.abs(z) > 2.0)
        return z, np.where(esc, z, z_out), np.where(esc, i + 1, n), alive & ~esc
    z = np.zeros(c.shape, np.complex128)
    return fori_loop(lo, hi, step, (z, z, np.zeros(c.shape, np.int64), np.ones(c.shape, bool)))


def relax(x, a, b, lo, hi):
    """A damped update reading a column and a row (broadcast inputs) and the step number."""
    def step(i, s):
        y, m = s
        y = 0.5 * y + a * b + 0.001 * i
        return y, np.maximum(m, y)
    return fori_loop(lo, hi, step, (x, x))


def neighbours(x, lo, hi):
    """Reads the next point: not pointwise (stays a loop of programs)."""
    def step(i, y):
        return 0.5 * (y + np.concatenate([y[..., 1:], y[..., :1]], axis=-1))
    return fori_loop(lo, hi, step, x)


def _text(f, *args) -> str:
    return rj.jit(f).lower(*args).compile().as_text("optimized")


@given(m=SIZES, n=SIZES, steps=st.sampled_from([0, 1, 7, 40]))
@settings(max_examples=25, deadline=None)
def test_escape_iteration_agrees_with_numpy(m, n, steps):
    # points well inside the set (|c| < 0.2: z converges) or well outside (|c| > 2.5: z
    # escapes at once): near its boundary the map is chaotic and amplifies rounding
    rng = np.random.default_rng(m * 1000 + n)
    r = np.where(rng.uniform(size=(m, n)) < 0.5, rng.uniform(0, 0.2, (m, n)), rng.uniform(2.5, 4, (m, n)))
    c = r * np.exp(1j * rng.uniform(0, 2 * np.pi, (m, n)))
    want = mandel(c, 0, steps)
    for b in BACKENDS:
        got = rj.jit(mandel, backend=b)(c, 0, np.int64(steps))
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
    assert "pointwise_loop" in _text(mandel, c, 0, np.int64(steps))


@given(shape=st.lists(SIZES, min_size=1, max_size=3).map(tuple),
       lo=st.integers(-3, 5), hi=st.integers(-3, 12))
@settings(max_examples=25, deadline=None)
def test_broadcast_inputs_and_step_numbers_agree_with_numpy(shape, lo, hi):
    """Any rank; inputs read along one axis; traced bounds, a start above the stop included
    (then the carries come back as they went in)."""
    rng = np.random.default_rng(sum(shape))
    x = rng.uniform(-1, 1, shape)
    a = rng.uniform(-1, 1, shape[:1] + (1,) * (len(shape) - 1))
    b = rng.uniform(-1, 1, shape[-1:])
    want = relax(x, a, b, lo, hi)
    for be in BACKENDS:
        got = rj.jit(relax, backend=be)(x, a, b, np.int64(lo), np.int64(hi))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    x0 = x.copy()
    rj.jit(relax)(x, a, b, np.int64(lo), np.int64(hi))
    np.testing.assert_array_equal(x, x0)          # the initial carry is not written
    assert "pointwise_loop" in _text(relax, x, a, b, np.int64(lo), np.int64(hi))


@given(m=SIZES, n=SIZES)
@settings(max_examples=10, deadline=None)
def test_a_body_reading_other_points_is_left_a_loop(m, n):
    x = np.random.default_rng(m + n).uniform(-1, 1, (m, n))
    want = neighbours(x, 0, 5)
    for b in BACKENDS:
        np.testing.assert_allclose(rj.jit(neighbours, backend=b)(x, 0, 5), want, rtol=1e-12)
    text = _text(neighbours, x, 0, 5)
    assert "pointwise_loop" not in text and "fori_loop" in text, text


def test_one_compile_serves_every_size_and_rows_of_many_tiles():
    f = rj.jit(relax)
    for m, n in [(3, 7), (1, 1), (64, 257), (5, 1), (2, 1500), (1, 3001)]:
        x = np.ones((m, n))
        a, b = np.full((m, 1), 0.25), np.linspace(0, 1, n)
        np.testing.assert_allclose(f(x, a, b, 0, 9)[0], relax(x, a, b, 0, 9)[0], rtol=1e-12)
    assert f.cache_info().compiles == 1
