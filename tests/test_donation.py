"""Buffer donation (``jit(..., donate_argnums=, donate_argnames=)``, JAX's names): on the LLVM
backend a donated argument's array holds the result a program updates it into (a cache
written at one position, ``x.at[i].set``), so the update is made in place and stores only what
it changes; results are NumPy's whatever happens, arrays that are not donated are never
written, and the array is not reused where that would be wrong (read-only, passed twice,
read again by the function)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.lax import dynamic_update_slice

from helpers import BACKENDS


def _write_row(c, r, i):
    return dynamic_update_slice(c, r, (i, 0))


@given(n=st.one_of(st.sampled_from([1, 2, 7]), st.integers(1, 300)), m=st.sampled_from([1, 5, 64]),
       i=st.integers(-2, 310), seed=st.integers(0, 2 ** 16))
@settings(max_examples=25, deadline=None)
def test_donated_cache_is_updated_in_place(n, m, i, seed):
    rng = np.random.default_rng(seed)
    c, r = rng.standard_normal((n, m)), rng.standard_normal((1, m))
    want = c.copy()
    want[min(max(i, 0), n - 1)] = r[0]
    r_keep = r.copy()
    for backend in BACKENDS:
        cc = c.copy()
        out = rj.jit(_write_row, donate_argnums=0, backend=backend)(cc, r, np.int64(i))
        np.testing.assert_array_equal(out, want)
        np.testing.assert_array_equal(r, r_keep)          # not donated: never written
        if backend == "llvm":
            assert np.shares_memory(out, cc)             # the donated array holds the result


def test_a_chain_of_donated_steps_and_updates_by_index():
    f = rj.jit(lambda x, i, v: x.at[i].set(v), donate_argnames="x")
    x = np.zeros(1000)
    for i in range(50):
        x = f(x, np.int64(i * 7), np.float64(i))
    want = np.zeros(1000)
    want[np.arange(50) * 7] = np.arange(50)
    np.testing.assert_array_equal(x, want)


def test_donated_pytrees():
    f = rj.jit(lambda caches, k, i: [dynamic_update_slice(c, k, (i, 0)) for c in caches], donate_argnums=0)
    caches = [np.zeros((6, 3)), np.ones((6, 3))]
    k = np.full((1, 3), 5.0)
    out = f(caches, k, np.int64(2))
    for c, o, base in zip(caches, out, (0.0, 1.0)):
        want = np.full((6, 3), base)
        want[2] = 5.0
        np.testing.assert_array_equal(o, want)
        assert np.shares_memory(o, c)


def test_arrays_that_must_not_be_written_are_not_reused():
    f = rj.jit(_write_row, donate_argnums=0)
    c = np.arange(12.0).reshape(4, 3)
    want = c.copy()
    want[1] = c[0]
    out = f(c, c[:1], np.int64(1))                      # the update reads the donated array
    np.testing.assert_array_equal(out, want)
    assert not np.shares_memory(out, c)
    ro = np.arange(12.0).reshape(4, 3)
    ro.flags.writeable = False                          # read-only: copied, never written
    out = f(ro, np.zeros((1, 3)), np.int64(0))
    assert not np.shares_memory(out, ro) and ro[0, 1] == 1.0
    g = rj.jit(lambda x, i: (x.at[i].set(0.0), x.sum()), donate_argnums=0)
    x = np.ones(5)
    y, total = g(x, np.int64(2))                        # x is read again: not reused
    assert total == 5.0 and y[2] == 0.0 and not np.shares_memory(y, x)


def test_results_passed_back_with_views_of_themselves_are_not_reused():
    """A large result lives in a pooled block behind a memoryview; donated back together
    with a view of itself (or two arrays over one foreign buffer), it must not be written
    while the view is still read."""
    f = rj.jit(_write_row, donate_argnums=0)
    grow = rj.jit(lambda c: c * 2.0)
    c = grow(np.arange(3 * 40000.0).reshape(40000, 3))          # a pooled result
    want = c.copy()
    want[7] = c[3]
    out = f(c, c[3:4], np.int64(7))
    np.testing.assert_array_equal(out, want)
    assert not np.shares_memory(out, c)
    out2 = f(c, np.zeros((1, 3)), np.int64(0))                  # nothing else shares it
    assert np.shares_memory(out2, c) and out2[0, 0] == 0.0
    buf = bytearray(np.arange(12.0).tobytes())
    a = np.frombuffer(buf, np.float64).reshape(4, 3)
    r = np.frombuffer(memoryview(buf)[:24], np.float64).reshape(1, 3)    # a's row 0, another view
    want = a.copy()
    want[2] = a[0]
    out = f(a, r, np.int64(2))
    np.testing.assert_array_equal(out, want)
    assert not np.shares_memory(out, a)


def _append(c, x):
    return rnp.concatenate([c, x * 2.0], axis=1)


@given(rows=st.lists(st.integers(0, 3), min_size=1, max_size=60), inner=st.sampled_from([(1,), (6, 4), (7,)]),
       seed=st.integers(0, 2 ** 16))
@example(rows=[1] * 40, inner=(6, 4), seed=0).via("a decode step's one row at a time")
@example(rows=[3, 0, 2] * 10, inner=(7,), seed=1).via("blocks of rows")
@settings(max_examples=15, deadline=None)
def test_a_donated_cache_grows_by_concatenation(rows, inner, seed):
    """``concatenate([cache, new], axis=1)`` with the cache donated (Relax's growing KV
    cache) equals NumPy's whatever the steps add (0 rows included), on every backend; on the
    LLVM backend the result takes the cache's memory while it has room (the driver keeps a
    grown cache in an array with a quarter more positions, ``relaxjax.growing``; at batch
    2 the result is a view of it), so most steps grow in place."""
    rng = np.random.default_rng(seed)
    for backend in BACKENDS:
        f = rj.jit(_append, donate_argnums=0, backend=backend)
        for batch in (1, 2):
            c = np.zeros((batch, 0) + inner, np.float32)
            want = c.copy()
            grown = 0
            for r in rows:
                x = rng.standard_normal((batch, r) + inner).astype(np.float32)
                prev, c = c, f(c, x)
                want = np.concatenate([want, x * np.float32(2)], axis=1)
                np.testing.assert_array_equal(c, want)
                grown += bool(prev.size) and np.shares_memory(c, prev)
            if backend != "llvm":
                assert grown == 0
            elif sum(rows) >= 20:
                assert grown >= len(rows) // 2, (grown, rows)


def _append_rows(c, x):
    return rnp.concatenate([c, x * 2.0], axis=0)


def test_a_grown_block_returns_to_the_pool_after_its_last_owner():
    """Along axis 0 the LLVM runtime grows a donated array into its memory block's room:
    arrays grown in one block share it, the block goes back to the pool once every one of
    them is gone, and a donated array used again meanwhile stays valid memory."""
    import gc
    from relaxjax.backends.llvm.buffer_pool import POOL
    f = rj.jit(_append_rows, donate_argnums=0)
    gc.collect()
    in_use = POOL.stats()["in_use"]
    c, olds = np.zeros((0, 64), np.float32), []
    for _ in range(40):
        olds.append(c)
        c = f(c, np.ones((1, 64), np.float32))
    assert np.shares_memory(c, olds[-1]) and c.flags.c_contiguous
    again = f(olds[20], np.full((1, 64), 5.0, np.float32))     # reused after donation
    assert again.shape == (21, 64) and (again[20] == 10.0).all() and (again[:20] == 2.0).all()
    del c, olds, again
    gc.collect()
    assert POOL.stats()["in_use"] == in_use


def test_bad_donation_arguments_say_what_is_wrong():
    with pytest.raises(ValueError, match="donate_argnums has 3"):
        rj.jit(_write_row, donate_argnums=3)
    with pytest.raises(ValueError, match="donate_argnames has 'z'"):
        rj.jit(_write_row, donate_argnames="z")
    with pytest.raises(ValueError, match="both static and donated"):
        rj.jit(_write_row, static_argnums=2, donate_argnums=2)
    with pytest.raises(TypeError, match="donate_argnums must be ints"):
        rj.jit(_write_row, donate_argnums="c")
