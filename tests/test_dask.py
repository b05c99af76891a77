"""Jitted functions on Dask's threaded scheduler (issue 22): ``da.map_blocks`` with a
``@rj.jit`` function over ragged chunk grids gives NumPy's result with one compile for every
chunk shape (Dask's zero-size meta call makes the dims start from 0); a jitted function
pickles (cloudpickle, as Dask ships it to workers) as its function and options, and every
copy a process unpickles is one Jitted; ``relaxjax.dask``'s stencils (``map_overlap``) and
reductions equal NumPy (float64) on hypothesis-drawn ragged chunkings (chunks of 1 and
primes) with one compile per function, its chunk functions keep each kernel on one thread
while Dask runs chunks, and its helpers name the argument they reject.  Skipped where Dask
is not installed (``pip install -e '.[dask]'``); tests/test_dask_cluster.py runs on a
``distributed`` LocalCluster."""
from __future__ import annotations

import importlib
import pickle
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import ragged_chunks

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
cloudpickle = pytest.importorskip("cloudpickle")

import relaxjax.dask as rjd  # noqa: E402  (needs dask)
from relaxjax.backends.llvm import engine  # noqa: E402

jit_module = importlib.import_module("relaxjax.jit")   # (``relaxjax.jit`` is the function)


def _stencil(x):
    """A chunk-local computation with reductions and broadcasting."""
    return rnp.tanh(x) * 2.0 + x.mean(axis=1, keepdims=True) - x[:, :1]


@given(rows=st.integers(1, 300), cols=st.integers(1, 40), chunk=st.integers(1, 120), seed=st.integers(0, 2 ** 16))
@settings(max_examples=15, deadline=None)
def test_map_blocks_over_ragged_chunks_compiles_once(rows, cols, chunk, seed):
    x = np.random.default_rng(seed).standard_normal((rows, cols))
    f = rj.jit(_stencil)
    y = da.from_array(x, chunks=(chunk, cols)).map_blocks(f).compute(scheduler="threads")
    want = np.tanh(x) * 2.0 + x.mean(axis=1, keepdims=True) - x[:, :1]
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    assert f.cache_info().compiles == 1


@given(rows=st.integers(1, 120), cols=st.integers(1, 17), chunk=st.integers(1, 50), seed=st.integers(0, 2 ** 16))
@settings(max_examples=8, deadline=None)
def test_xarray_apply_ufunc_parallelized_compiles_once(rows, cols, chunk, seed):
    """``xarray.apply_ufunc(f, arr, dask="parallelized")`` with a jitted ``f`` unchanged,
    elementwise and with a core dimension: NumPy's results, one compile for every chunk."""
    xr = pytest.importorskip("xarray")
    x = np.random.default_rng(seed).standard_normal((rows, cols))
    f = rj.jit(lambda v: rnp.tanh(v) * 2.0 + v.mean(axis=-1, keepdims=True))
    arr = xr.DataArray(da.from_array(x, chunks=(chunk, cols)), dims=("t", "s"))
    want = np.tanh(x) * 2.0 + x.mean(axis=-1, keepdims=True)
    for kw in ({"output_dtypes": [np.float64]}, {"input_core_dims": [["s"]], "output_core_dims": [["s"]]}):
        got = xr.apply_ufunc(f, arr, dask="parallelized", **kw).compute(scheduler="threads")
        assert got.dims == ("t", "s")
        np.testing.assert_allclose(got.values, want, rtol=1e-12, atol=1e-12)
    assert f.cache_info().compiles == 1


def test_jitted_functions_pickle_as_function_and_options():
    f = rj.jit(lambda x, k: rnp.tanh(x) * k, static_argnums=1, donate_argnums=0)
    x = np.random.default_rng(0).standard_normal((4, 3))
    np.testing.assert_allclose(f(x.copy(), 3), np.tanh(x) * 3)
    g = pickle.loads(cloudpickle.dumps(f))
    assert g.cache_info().compiles == 0 and g.static_argnums == (1,) and g.donated == f.donated
    np.testing.assert_allclose(g(x.copy(), 3), np.tanh(x) * 3)
    h = pickle.loads(pickle.dumps(rj.jit(_stencil)))          # a module-level function: plain pickle
    np.testing.assert_allclose(h(x), _stencil.__wrapped__(x) if hasattr(_stencil, "__wrapped__")
                               else np.tanh(x) * 2.0 + x.mean(axis=1, keepdims=True) - x[:, :1])


# -- relaxjax.dask: stencils, reductions, threads, compile counts (threaded scheduler) -----
ROOT = Path(__file__).resolve().parents[1]


def _cross(u):
    """A stencil of halo 1 along axis 0 and 2 along axis 1: the interior of its argument."""
    return u[2:, 2:-2] + u[:-2, 2:-2] + 0.5 * (u[1:-1, 4:] + u[1:-1, :-4]) - 3.0 * u[1:-1, 2:-2]


def _one_step(u):
    """One smoothing step of the interior, the block's shape kept (its ring as it was)."""
    lap = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * u[1:-1, 1:-1]
    return u.at[1:-1, 1:-1].add(0.2 * lap)


def _one_step_numpy(u):
    out = u.copy()
    out[1:-1, 1:-1] += 0.2 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * u[1:-1, 1:-1])
    return out


CROSS, ONE_STEP = rj.jit(_cross), rj.jit(_one_step)
# dask's boundary -> numpy.pad's mode (and keyword arguments)
PAD = {"reflect": ("symmetric", {}), "periodic": ("wrap", {}), "nearest": ("edge", {}),
       1.5: ("constant", {"constant_values": 1.5})}


@given(data=st.data(), rows=st.integers(5, 40), cols=st.integers(5, 30),
       boundary=st.sampled_from(["reflect", "periodic", "nearest", 1.5, "none"]),
       seed=st.integers(0, 2 ** 16))
@settings(max_examples=20, deadline=None)
def test_map_overlap_matches_numpy_with_one_compile_for_every_chunking(data, rows, cols, boundary, seed):
    """Both result kinds over ragged grids (chunks of 1 and primes, which Dask rechunks to fit
    the halo) and every boundary: NumPy's result on the padded array, one compile each for
    all the examples' block shapes."""
    x = np.random.default_rng(seed).standard_normal((rows, cols))
    chunks = (data.draw(ragged_chunks(rows)), data.draw(ragged_chunks(cols)))
    dx = da.from_array(x, chunks=chunks)
    got = rjd.map_overlap(CROSS, dx, {0: 1, 1: 2}, boundary).compute(scheduler="threads", num_workers=2)
    stepped = rjd.map_overlap(ONE_STEP, dx, 1, boundary, result="extended").compute(scheduler="threads")
    if boundary == "none":          # the valid region; the edges of the stepped array unchanged
        want = _cross(x)
        want_step = x.copy()
        want_step[1:-1, 1:-1] = _one_step_numpy(x)[1:-1, 1:-1]
    else:
        mode, kw = PAD[boundary]
        want = _cross(np.pad(x, ((1, 1), (2, 2)), mode=mode, **kw))
        want_step = _one_step_numpy(np.pad(x, 1, mode=mode, **kw))[1:-1, 1:-1]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(stepped, want_step, rtol=1e-12, atol=1e-12)
    assert CROSS.cache_info().compiles == 1 and ONE_STEP.cache_info().compiles == 1


@given(data=st.data(), shape=st.lists(st.integers(1, 12), min_size=1, max_size=3), seed=st.integers(0, 2 ** 16))
@settings(max_examples=40, deadline=None)
def test_halo_exchange_gives_dasks_extended_blocks_in_one_or_two_tasks_per_chunk(data, shape, seed):
    """The extended chunks ``map_overlap`` assembles (``relaxjax.dask_halo``) are Dask's own
    ``overlap``'s, element for element, for 1-3 axes, ragged grids, a boundary per axis
    (mixed), depths 0-3 and unequal sides with "none"; in two tasks per chunk, or one where
    the stencil tasks read whole neighbouring blocks."""
    from dask.array.overlap import overlap
    from relaxjax.dask_halo import extended_chunks, map_halo, reads_whole_blocks, rechunked
    x = np.random.default_rng(seed).standard_normal(shape)
    dx = da.from_array(x, chunks=tuple(data.draw(ragged_chunks(n)) for n in shape))
    kinds = tuple(data.draw(st.sampled_from(["reflect", "periodic", "nearest", -2.5, "none"])) for _ in shape)
    sides = []
    for n, kind in zip(shape, kinds):
        lo = data.draw(st.integers(0, min(3, n)))
        hi = data.draw(st.integers(0, min(3, n))) if kind == "none" else lo
        sides.append((lo, hi))
    depth = {ax: (lo, hi) if kinds[ax] == "none" else lo for ax, (lo, hi) in enumerate(sides)}
    want = overlap(dx, depth=depth, boundary=dict(enumerate(kinds)))
    xr = rechunked(dx, sides, allow_rechunk=True)
    got = map_halo(lambda b: b, xr, sides, kinds, trim=False, chunks=extended_chunks(xr, sides, kinds),
                   meta=np.empty((0,) * x.ndim), name="identity")
    assert got.chunks == want.chunks
    np.testing.assert_array_equal(got.compute(scheduler="sync"), want.compute(scheduler="sync"))
    trimmed = map_halo(lambda b: b, xr, sides, kinds, trim=True, chunks=xr.chunks,
                       meta=np.empty((0,) * x.ndim), name="identity")
    np.testing.assert_array_equal(trimmed.compute(scheduler="sync"), x)
    own = len(dict(got.__dask_graph__())) - len(dict(xr.__dask_graph__()))
    assert own == (1 if reads_whole_blocks(xr.chunks, sides) else 2) * xr.npartitions


def _sum_squares(b, axis):
    return rnp.sum(b * b, axis=axis, keepdims=True)


def _sum(b, axis):
    return rnp.sum(b, axis=axis, keepdims=True)


def _max(b, axis):
    return rnp.max(b, axis=axis, keepdims=True)


SUM_SQUARES, SUM, MAX = (rj.jit(f, static_argnums=1) for f in (_sum_squares, _sum, _max))
_AXES_SEEN: set = set()


@given(data=st.data(), rows=st.integers(1, 40), cols=st.integers(1, 30),
       axis=st.sampled_from([None, 0, 1, -1, (0, 1)]), keepdims=st.booleans(),
       split_every=st.sampled_from([None, 2, 3]), seed=st.integers(0, 2 ** 16))
@settings(max_examples=20, deadline=None)
def test_reduction_matches_numpy_with_one_compile_per_axis(data, rows, cols, axis, keepdims, split_every, seed):
    """Sum of squares (chunk step) summed (combine step) and a max, over ragged grids with
    trees of partial results: NumPy's result, and each step compiled once per set of
    reduced axes (its static argument), whatever the chunk shapes."""
    x = np.random.default_rng(seed).standard_normal((rows, cols))
    dx = da.from_array(x, chunks=(data.draw(ragged_chunks(rows)), data.draw(ragged_chunks(cols))))
    sq = rjd.reduction(SUM_SQUARES, SUM, dx, axis, keepdims=keepdims, split_every=split_every)
    top = rjd.reduction(MAX, MAX, dx, axis, keepdims=keepdims, split_every=split_every)
    got_sq, got_top = dask.compute(sq, top, scheduler="threads")
    np.testing.assert_allclose(got_sq, (x * x).sum(axis=axis, keepdims=keepdims), rtol=1e-12)
    np.testing.assert_array_equal(got_top, x.max(axis=axis, keepdims=keepdims))
    assert sq.dtype == np.float64 and got_sq.shape == sq.shape
    _AXES_SEEN.add(tuple(sorted(a % 2 for a in ((0, 1) if axis is None else np.atleast_1d(axis)))))
    for f in (SUM_SQUARES, SUM, MAX):
        assert f.cache_info().compiles == len(_AXES_SEEN), (f, f.cache_info(), _AXES_SEEN)



def test_plain_functions_are_jitted_once_and_counted():
    """A plain function given to the helpers again (a time loop) is the same Jitted: one
    compile, which compile_counts(None, ...) reports by the function's name."""
    x = da.from_array(np.arange(60.0).reshape(12, 5), chunks=(5, 3))
    u = x
    for _ in range(3):
        u = rjd.map_overlap(_one_step, u, 1, "periodic", result="extended")
    total = rjd.reduction(_sum, _sum, u)
    want = np.arange(60.0).reshape(12, 5)
    for _ in range(3):
        want = _one_step_numpy(np.pad(want, 1, mode="wrap"))[1:-1, 1:-1]
    np.testing.assert_allclose(u.compute(scheduler="threads"), want, rtol=1e-12)
    np.testing.assert_allclose(total.compute(scheduler="threads"), want.sum(), rtol=1e-12)
    assert rjd.compile_counts(None, _one_step, _sum) == {"local": {"_one_step": 1, "_sum": 1}}
    twins = rjd.compile_counts(None, rj.jit(_sum), rj.jit(_sum))
    assert twins == {"local": {"_sum#0": 0, "_sum#1": 0}}


def test_chunk_functions_run_kernels_on_one_thread_and_restore_the_team():
    """While the threaded scheduler runs chunks, every kernel's team is one thread; after,
    the team is what it was; the meta probe is traced, never compiled."""
    seen, lock = [], threading.Lock()

    def probe(block):
        with lock:
            seen.append(engine.get_num_threads())
        return block * 2.0

    probe.__name__ = "probe"
    before = engine.get_num_threads()
    engine.set_num_threads(3)
    try:
        y = da.map_blocks(rjd.ChunkFunction(probe, kernel_threads=1),
                          da.from_array(np.ones((40, 3)), chunks=(4, 3)), dtype=float)
        np.testing.assert_array_equal(y.compute(scheduler="threads", num_workers=2), 2.0)
        assert seen and set(seen) == {1}
        assert engine.get_num_threads() == 3
    finally:
        engine.set_num_threads(before)
    # a whole-block sum: Dask's probe with an empty block has a result (the Jitted alone
    # would compile for it); the chunk function answers it by tracing
    f = rjd.chunk_function(rj.jit(lambda a: rnp.sum(a, keepdims=True)), kernel_threads=None)
    meta = f(np.empty((0, 0), np.float32), computing_meta=True)
    assert meta.shape == (0, 0) and meta.dtype == np.float32 and f.jitted.cache_info().compiles == 0
    sums = da.map_blocks(f, da.from_array(np.ones((6, 4)), chunks=(2, 4)), chunks=((1,) * 3, (1,)),
                         dtype=np.float64)
    assert sums.dtype == np.float64 and f.jitted.cache_info().compiles == 0
    np.testing.assert_array_equal(sums.compute(scheduler="threads"), np.full((3, 1), 8.0))
    assert f.jitted.cache_info().compiles == 1


def test_kernel_threads_blocks_in_several_threads_share_one_setting():
    """The first block to open sets the team, the last to close restores it."""
    before = engine.get_num_threads()
    opened, release = threading.Barrier(3), threading.Event()

    def task():
        with rjd.kernel_threads(1):
            opened.wait()
            release.wait()

    threads = [threading.Thread(target=task) for _ in range(2)]
    for t in threads:
        t.start()
    opened.wait()
    assert engine.get_num_threads() == 1
    release.set()
    for t in threads:
        t.join()
    assert engine.get_num_threads() == before
    with pytest.raises(ValueError, match="kernel_threads: n must be an int >= 1"):
        with rjd.kernel_threads(0):
            pass


def test_unpickled_copies_of_one_jitted_are_one_jitted_per_process(monkeypatch):
    """Every task's pickled copy of a function unpickles as the same Jitted (compiled once,
    not per task); another Jitted of the same function is another; the memo is bounded."""
    f = rj.jit(lambda x: rnp.tanh(x) + 1.0)
    g1, g2 = (pickle.loads(cloudpickle.dumps(f)) for _ in range(2))
    assert g1 is g2 and g1 is not f and jit_module.unpickled(jit_module.pickle_token(f)) is g1
    x = np.linspace(-1, 1, 7)
    np.testing.assert_allclose(g1(x), np.tanh(x) + 1.0)
    assert pickle.loads(cloudpickle.dumps(f)).cache_info().compiles == 1
    assert pickle.loads(cloudpickle.dumps(g1)) is g1          # a copy keeps its token
    other = pickle.loads(cloudpickle.dumps(rj.jit(f.fun)))
    assert other is not g1 and other.cache_info().compiles == 0
    chunk = pickle.loads(cloudpickle.dumps(rjd.chunk_function(f, kernel_threads=2, extra_args=(3,))))
    assert chunk.jitted is g1 and chunk.kernel_threads == 2 and chunk.extra_args == (3,)
    monkeypatch.setattr(jit_module, "MAX_UNPICKLED", 2)
    fs = [rj.jit(lambda x: x + 1.0) for _ in range(3)]
    for h in fs:
        pickle.loads(cloudpickle.dumps(h))
    tokens = [jit_module.pickle_token(h) for h in fs]
    assert jit_module.unpickled(tokens[0]) is None and jit_module.unpickled(tokens[2]) is not None


@pytest.mark.parametrize("call, message", [
    (lambda x: rjd.map_overlap(CROSS, np.ones((5, 5)), 1), r"x: expected a dask\.array\.Array"),
    (lambda x: rjd.map_overlap(42, x, 1), r"f: expected a function"),
    (lambda x: rjd.map_overlap(CROSS, x, -1), r"depth: axis 0 needs a size >= 0"),
    (lambda x: rjd.map_overlap(CROSS, x, (1, 2, 3)), r"depth: one per axis of x \(2\)"),
    (lambda x: rjd.map_overlap(CROSS, x, {5: 1}), r"depth: axes must be in \[0, 2\)"),
    (lambda x: rjd.map_overlap(CROSS, x, 1.5), r"depth: expected an int"),
    (lambda x: rjd.map_overlap(CROSS, x, ((1, 2), 1), "reflect"), r"depth: axis 0 has different halos"),
    (lambda x: rjd.map_overlap(CROSS, x, 1, "mirror"), r"boundary: axis 0 takes one of"),
    (lambda x: rjd.map_overlap(CROSS, x, {0: 1, 1: 2}, result="trimmed"), r"result: 'interior' or 'extended'"),
    (lambda x: rjd.map_overlap(CROSS, x, 1), r"f: with result='interior' a block of shape \(5, 6\) \(halo included\) must give shape \(3, 4\), got \(3, 2\)"),
    (lambda x: rjd.map_overlap(ONE_STEP, x, 1, kernel_threads=0), r"kernel_threads: expected None or an int"),
    (lambda x: rjd.map_overlap(CROSS, x.rechunk((9, 8)), 5, "none"),
     r"depth: axis 0's chunks \(9,\) are too short for a halo of \(5, 5\) with boundary 'none'"),
    (lambda x: rjd.map_overlap(ONE_STEP, x, 1, extra_args=[2]), r"extra_args: must be a tuple"),
    (lambda x: rjd.reduction(SUM, SUM, x, axis=2), r"axis: 2 is out of range"),
    (lambda x: rjd.reduction(SUM, SUM, x, axis=(0, -2)), r"axis: -2 is given twice"),
    (lambda x: rjd.reduction(SUM, SUM, x, axis="rows"), r"axis: expected None, an int"),
    (lambda x: rjd.reduction(rj.jit(_sum), SUM, x), r"chunk_fn: this jitted function must take argument 1"),
    (lambda x: rjd.reduction(lambda b, axis: rnp.sum(b, axis=axis), SUM, x, 0),
     r"chunk_fn: a chunk of shape \(3, 4\) reduced over axes \(0,\) must give shape \(1, 4\)"),
    (lambda x: rjd.reduction(SUM, lambda b, axis: rnp.sum(b, axis=axis, keepdims=True) > 0, x),
     r"combine_fn: must keep the dtype"),
    (lambda x: rjd.reduction(SUM, SUM, x, keepdims="yes"), r"keepdims: expected a bool"),
    (lambda x: rjd.compile_counts(None), r"compile_counts: pass the functions"),
    (lambda x: rjd.compile_counts(None, lambda b: b), r"fns\[0\]: .* is a plain function that no"),
    (lambda x: rjd.compile_counts(object(), SUM), r"client: expected a distributed.Client"),
])
def test_helpers_name_the_argument_they_reject(call, message):
    x = da.from_array(np.ones((9, 8)), chunks=(3, 4))
    with pytest.raises((TypeError, ValueError), match=message):
        call(x)


def test_example_runs_on_the_threaded_scheduler():
    """examples/dask_stencil.py --small: a periodic heat equation, halo exchanges per round,
    agrees with NumPy, conserves heat, and compiles each function once."""
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "dask_stencil.py"), "--small"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    err = float(re.search(r"max \|error\| vs NumPy (\S+?);", r.stdout).group(1))
    assert err < 1e-9, r.stdout
    assert "compiles in local: heat_steps 1, block_sum 1, block_max 1" in r.stdout, r.stdout
