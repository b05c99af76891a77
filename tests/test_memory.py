"""Memory planning over symbolic shapes (``relaxjax.compile.memplan``) and the LLVM backend's
use of it: intermediates share storage carved from a per-thread workspace (or per call from
the pool), large results come from a process-wide pool and go back to it once the user's
array and every view of it are gone."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.backends.llvm import buffer_pool, runner_memory
from relaxjax.compile import run_pipeline
from relaxjax.compile.legalize import legalize
from relaxjax.compile.memplan import byte_size, plan_memory
from relaxjax.ir import Var
from relaxjax.shapes import ShapeEnv

from helpers import SIZES, assert_same

S = rj.ShapeDtypeStruct
TOL = dict(rtol=2e-5, atol=2e-5)


def layer_norm(x):
    m = rnp.mean(x, axis=-1, keepdims=True)
    v = rnp.mean((x - m) ** 2, axis=-1, keepdims=True)
    return (x - m) / rnp.sqrt(v + 1e-5)


def np_layer_norm(x):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + np.float32(1e-5))


def chain(x):
    y = rnp.exp(x) * 2.0
    z = rnp.tanh(y) + x
    w = rnp.sum(z * z, axis=1)
    return rnp.sqrt(w + 1.0) - rnp.sum(x, axis=1)


def np_chain(x):
    y = np.exp(x) * np.float32(2.0)
    z = np.tanh(y) + x
    w = np.sum(z * z, axis=1)
    return np.sqrt(w + np.float32(1.0)) - np.sum(x, axis=1)


def lowered(f, *structs):
    """The entry function after legalize only (no fusion): one call per op."""
    return run_pipeline(rj.jit(f).lower(*structs).module, [legalize]).main


def compiled(f, *structs):
    return rj.jit(f, pipeline=[legalize]).lower(*structs).compile([legalize])


def check_plan(fn, plan):
    """The invariants of any plan: sizes fit, live ranges of one storage do not overlap, no
    output shares storage with an operand of its call, results are never planned."""
    env = ShapeEnv("explicit", fn.bounds)
    for v, s in plan.storage_of.items():
        assert env.try_prove(">=", s.size, byte_size(v)) is True, (v, s.size)
    for s in plan.storages:
        ranges = [plan.live[v] for v in s.values]
        for (a0, a1), (b0, b1) in zip(ranges, ranges[1:]):
            assert a0 <= a1 < b0 <= b1, ranges
    for b in fn.bindings:
        outs = {plan.storage_of[v].index for v in b.outvars if v in plan.storage_of}
        ins = {plan.storage_of[a].index for a in b.args if isinstance(a, Var) and a in plan.storage_of}
        assert not outs & ins, b
    assert not {r for r in fn.results if isinstance(r, Var)} & set(plan.storage_of)


# ---------------------------------------------------------------------------------------
# The analysis
# ---------------------------------------------------------------------------------------

def test_chain_of_ops_shares_storage():
    fn = lowered(chain, S(("n", "m"), "float32"))
    plan = plan_memory(fn)
    check_plan(fn, plan)
    n_values = len(plan.storage_of)
    assert n_values >= 6
    assert len(plan.storages) < n_values
    assert len(plan.storages) <= 3
    # n*m-sized values and n-sized ones: reuse grows a storage only where provable
    text = str(plan)
    assert text.startswith(f"memory plan of chain: {n_values} values in {len(plan.storages)} storages")
    assert "s0: " in text and "m * n * 4 bytes" in text
    assert "not planned:" in text and "(function result)" in text
    assert "workspace: none" in text            # n and m are unbounded
    assert plan.workspace_bytes is None


def test_bounded_dims_give_an_int_workspace():
    n = rj.dim("n", max=4096)
    fn = lowered(layer_norm, S((n, 16), "float32"))
    plan = plan_memory(fn)
    check_plan(fn, plan)
    assert len(plan.storages) < len(plan.storage_of)
    assert isinstance(plan.workspace_bytes, int)
    # every storage is at most n*64 bytes (an f32[n, 16]), 4096*64 at most, 64-byte aligned
    assert plan.workspace_bytes <= len(plan.storages) * 4096 * 64
    offsets = [s.offset for s in plan.storages]
    assert all(o % 64 == 0 for o in offsets) and len(set(offsets)) == len(offsets)
    assert "workspace: " in str(plan) and "(<= 262144)" in str(plan)


def test_storage_grows_only_when_provable():
    # x: f32[n, m]; sums are f32[n]; a value of f32[m, 2] vs f32[n] is not comparable
    def f(x, y):
        a = rnp.sum(rnp.exp(x), axis=1)          # n
        b = rnp.exp(y) + 1.0                     # m * 2
        c = rnp.tanh(x) * 2.0                    # n * m
        return rnp.sum(c, axis=1) + a, rnp.sum(b, axis=1)
    fn = lowered(f, S(("n", "m"), "float32"), S(("m", 2), "float32"))
    plan = plan_memory(fn)
    check_plan(fn, plan)
    env = ShapeEnv("explicit", fn.bounds)
    for s in plan.storages:
        sizes = [byte_size(v) for v in s.values]
        for a in sizes:          # any two values of one storage are provably ordered
            for b in sizes:
                assert env.try_prove(">=", a, b) or env.try_prove(">=", b, a), (a, b)


def test_no_output_aliases_an_operand_even_when_the_operand_dies():
    fn = lowered(lambda x: rnp.exp(rnp.exp(rnp.exp(rnp.exp(x)))), S(("n",), "float32"))
    plan = plan_memory(fn)
    check_plan(fn, plan)
    # exp(exp(...)): each value dies at the next call, which must not write over it
    assert len(plan.storages) == 2 and len(plan.storage_of) == 3


def test_views_extend_the_live_range_and_results_views_are_not_planned():
    def f(x):
        a = rnp.exp(x)                        # viewed by the result
        b = rnp.sum(x, axis=1)                # viewed by a reshape used later
        c = rnp.reshape(b, (-1, 1))
        d = rnp.tanh(x) * 3.0
        e = x * c + d
        return rnp.reshape(a, (-1,)), e
    fn = lowered(f, S(("n", "m"), "float32"))
    plan = plan_memory(fn)
    check_plan(fn, plan)
    reshapes = [b for b in fn.bindings if b.kind == "primitive" and b.callee.name == "reshape"]
    to_result = next(b for b in reshapes if b.outvars[0] in fn.results)
    assert to_result.args[0] not in plan.storage_of
    assert plan.unplanned[to_result.args[0]] == "a result views it"
    # the reshaped sum is used by a later call: the sum's storage lives until then
    view = next(b for b in reshapes if b.outvars[0] not in fn.results)
    use = max(i for i, b in enumerate(fn.bindings) if view.outvars[0] in b.args)
    assert plan.live[view.args[0]][1] >= use, plan


# ---------------------------------------------------------------------------------------
# The LLVM runner
# ---------------------------------------------------------------------------------------

def test_workspace_means_no_intermediate_allocation_after_warmup():
    n = rj.dim("n", max=4096)
    c = compiled(layer_norm, S((n, 16), "float32"))
    s0 = c.memory_stats()
    assert s0["mode"] == "workspace" and isinstance(s0["workspace_bytes"], int)
    assert s0["intermediate_storages"] < s0["intermediate_values"]
    assert s0["allocations_per_call"] is None
    x = np.random.default_rng(0).standard_normal((100, 16)).astype(np.float32)
    assert_same(c(x), np_layer_norm(x), **TOL)
    assert c.memory_stats()["intermediate_allocations_per_call"] == 1     # the workspace
    for k in (100, 7, 4096, 1):
        y = np.random.default_rng(k).standard_normal((k, 16)).astype(np.float32)
        assert_same(c(y), np_layer_norm(y), **TOL)
        st_ = c.memory_stats({"n": k})
        assert st_["intermediate_allocations_per_call"] == 0
        assert st_["allocations_per_call"] == st_["output_allocations_per_call"] <= 1
        assert isinstance(st_["intermediate_bytes"], int)
    assert "_new_ws()" in c.as_text("host")
    assert c.as_text("memory").startswith("memory plan of layer_norm: ")
    with pytest.raises(rj.ShapeError):
        c(np.zeros((4097, 16), np.float32))


def test_intermediate_bytes_evaluates_with_dims():
    n = rj.dim("n", max=4096)
    c = compiled(layer_norm, S((n, 16), "float32"))
    st_ = c.memory_stats()
    assert isinstance(st_["intermediate_bytes"], str) and "n" in st_["intermediate_bytes"]
    at = c.memory_stats({"n": 10})
    assert isinstance(at["intermediate_bytes"], int)
    assert at["intermediate_bytes"] < at["intermediate_bytes_without_reuse"]
    assert at["intermediate_bytes"] == 10 * c.memory_stats({"n": 1})["intermediate_bytes"]


@settings(deadline=None)
@given(n=SIZES, bounded=st.booleans())
def test_results_equal_numpy(n, bounded):
    c = _chain_exe(bounded)
    x = np.random.default_rng(n).uniform(-2, 2, (n, 17)).astype(np.float32)
    assert_same(c(x), np_chain(x), **TOL)
    assert_same(c(x[:1]), np_chain(x[:1]), **TOL)
    assert_same(c(x), np_chain(x), **TOL)


_EXES: dict = {}


def _chain_exe(bounded, small_pool=False):
    key = (bounded, small_pool)
    if key not in _EXES:
        shape = (rj.dim("n", max=512) if bounded else "n", 17)
        old = runner_memory.POOL_MIN_BYTES
        if small_pool:
            runner_memory.POOL_MIN_BYTES = 64     # read when the runner is generated
        try:
            _EXES[key] = compiled(chain, S(shape, "float32"))
        finally:
            runner_memory.POOL_MIN_BYTES = old
    return _EXES[key]


@settings(deadline=None)
@given(n=SIZES)
def test_results_equal_numpy_with_pooled_storage(n):
    """Unbounded dims and a tiny pool threshold: storages and results come from the pool."""
    c = _chain_exe(False, small_pool=True)
    assert c.memory_stats()["mode"] == "per-call"
    x = np.random.default_rng(n).uniform(-2, 2, (n, 17)).astype(np.float32)
    r = c(x)
    assert_same(r, np_chain(x), **TOL)
    y = x[::-1].copy()
    r2 = c(y)
    assert_same(r, np_chain(x), **TOL)        # the first result is intact
    assert_same(r2, np_chain(y), **TOL)


def test_outputs_are_distinct_across_calls():
    for c in (compiled(layer_norm, S(("n", 1024), "float32")),          # large: pooled
              compiled(layer_norm, S((rj.dim("n", max=64), 16), "float32"))):   # small
        x = np.random.default_rng(1).standard_normal((64, c._entry.module.main.params[0].type.shape[1]))
        x = x.astype(np.float32)
        y = x * 3 + 1
        r1 = c(x)
        r2 = c(y)
        assert r1 is not r2 and not np.shares_memory(r1, r2)
        assert_same(r1, np_layer_norm(x), **TOL)
        assert_same(r2, np_layer_norm(y), **TOL)


def test_pool_recycles_large_outputs_and_views_survive():
    c = compiled(layer_norm, S((rj.dim("n", max=256), 1024), "float32"))   # only the result pooled
    rng = np.random.default_rng(2)
    x = rng.standard_normal((128, 1024)).astype(np.float32)        # 512 KiB result
    r = c(x)
    gc.collect()
    want = np_layer_norm(x)
    assert_same(r, want, **TOL)
    h0 = c.memory_stats()["pool_hits"]
    in_use = buffer_pool.POOL.stats()["in_use"]
    del r
    gc.collect()
    assert buffer_pool.POOL.stats()["in_use"] == in_use - 1
    r = c(x)
    assert c.memory_stats()["pool_hits"] == h0 + 1
    assert c.memory_stats()["output_allocations_per_call"] == 0
    # a view of the result keeps its memory: nothing returns it to the pool
    v = r[3:]
    flat = r.reshape(-1)[7:]
    t = r.T
    del r
    gc.collect()
    for k in range(4):
        y = rng.standard_normal((128, 1024)).astype(np.float32)
        out = c(y)
        assert not np.shares_memory(out, v)
        assert_same(out, np_layer_norm(y), **TOL)
        del out
        gc.collect()
    assert_same(v, want[3:], **TOL)
    assert_same(flat, want.reshape(-1)[7:], **TOL)
    assert_same(t, want.T, **TOL)


def test_four_threads_share_one_function():
    n = rj.dim("n", max=4096)
    cs = [compiled(layer_norm, S((n, 256), "float32")),     # workspace per thread
          compiled(layer_norm, S(("n", 256), "float32"))]   # per-call storages from the pool
    errors = []

    def work(c, k):
        rng = np.random.default_rng(k)
        try:
            for it in range(15):
                m = [1, 257, 1031, 4096][(k + it) % 4]
                x = rng.standard_normal((m, 256)).astype(np.float32)
                r = c(x)
                assert_same(r, np_layer_norm(x), **TOL)
        except Exception as e:      # noqa: BLE001 (reported below)
            errors.append(e)
    for c in cs:
        threads = [threading.Thread(target=work, args=(c, k)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[0]


def test_data_dependent_ops_between_planned_values():
    def f(x):
        y = rnp.exp(x) - 1.0
        z = y[y > 0.5]                   # data-dependent size
        return rnp.sum(z * 2.0) + rnp.sum(rnp.tanh(y) * y)

    def g(x):
        y = np.exp(x) - np.float32(1.0)
        z = y[y > 0.5]
        return np.sum(z * np.float32(2.0)) + np.sum(np.tanh(y) * y)
    c = compiled(f, S(("n",), "float32"))
    for n in (1, 5, 300):
        x = np.random.default_rng(n).uniform(-1, 1, n).astype(np.float32)
        assert_same(c(x), g(x), rtol=1e-4, atol=1e-4)


def test_matmul_and_multiple_results():
    def f(x, w):
        h = rnp.tanh(x @ w + 1.0)
        return h @ w.T, rnp.sum(h, axis=0), rnp.reshape(h * 2.0, (-1,))

    def g(x, w):
        h = np.tanh(x @ w + np.float32(1.0))
        return h @ w.T, np.sum(h, axis=0), (h * np.float32(2.0)).reshape(-1)
    c = compiled(f, S(("n", "k"), "float32"), S(("k", "m"), "float32"))
    rng = np.random.default_rng(3)
    for n, k, m in ((1, 1, 1), (7, 13, 5), (64, 32, 300)):
        x = rng.standard_normal((n, k)).astype(np.float32)
        w = rng.standard_normal((k, m)).astype(np.float32)
        assert_same(c(x, w), g(x, w), rtol=1e-4, atol=1e-4)


def test_pooling_off_builds_the_plain_runner(monkeypatch):
    monkeypatch.setattr(runner_memory, "POOLING", False)
    c = compiled(layer_norm, S((rj.dim("n", max=4096), 16), "float32"))
    assert "_ws" not in c.as_text("host") and "_out" not in c.as_text("host")
    st_ = c.memory_stats()
    assert st_["mode"] == "off" and st_["intermediate_storages"] > 0
    x = np.random.default_rng(4).standard_normal((33, 16)).astype(np.float32)
    assert_same(c(x), np_layer_norm(x), **TOL)


def test_buffer_pool_is_bounded():
    pool = buffer_pool.BufferPool(max_per_size=2, max_bytes=3 * 1024)
    blocks = [buffer_pool._aligned_block(1024) for _ in range(4)]
    assert all(b.__array_interface__["data"][0] % 64 == 0 for b in blocks)
    for b in blocks:
        pool.put(b)
    assert pool.stats()["blocks"] == 2 and pool.stats()["dropped"] == 2
    pool.put(buffer_pool._aligned_block(1100))      # over max_bytes: evicts a 1024 block
    assert pool.stats()["blocks"] == 2 and pool.stats()["bytes"] == 1024 + 1100
    assert pool.take(1100) is not None and pool.take(1024) is not None
    assert pool.take(1024) is None


def test_memory_stats_needs_the_llvm_backend():
    c = rj.jit(lambda x: x + 1.0, backend="numpy").lower(S(("n",), "float32")).compile()
    with pytest.raises(NotImplementedError, match="memory_stats"):
        c.memory_stats()


def test_workspace_over_the_cap_sizes_storage_per_call(monkeypatch):
    monkeypatch.setattr(runner_memory, "WORKSPACE_MAX_BYTES", 1000)
    c = compiled(layer_norm, S((rj.dim("n", max=4096), 16), "float32"))
    st_ = c.memory_stats()
    assert st_["mode"] == "per-call" and isinstance(st_["workspace_bytes"], int)
    for n in (1, 50, 4096):
        x = np.random.default_rng(n).standard_normal((n, 16)).astype(np.float32)
        assert_same(c(x), np_layer_norm(x), **TOL)


# random straight-line programs: every plan keeps its invariants and the results stay right
_OPS = st.lists(st.tuples(st.sampled_from(["tanh", "sin", "half", "add", "mul", "sum", "sumk"]),
                          st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=14)


def _program(ops, xp):
    def f(x):
        vals = [x]
        for op, i, j in ops:
            a, b = vals[i % len(vals)], vals[j % len(vals)]
            if op == "tanh":
                vals.append(xp.tanh(a))
            elif op == "sin":
                vals.append(xp.sin(a))
            elif op == "half":
                vals.append(a * 0.5)
            elif op in ("add", "mul"):
                if a.ndim != b.ndim:
                    continue
                vals.append(a + b if op == "add" else a * b)
            elif a.ndim == 2:
                vals.append(xp.sum(a, axis=1, keepdims=op == "sumk"))
        return vals[-1], vals[len(vals) // 2]
    return f


@settings(deadline=None, max_examples=25)
@given(ops=_OPS, n=st.sampled_from([1, 3, 31, 200]), m=st.sampled_from([1, 7, 64]),
       small_pool=st.booleans())
def test_random_programs(ops, n, m, small_pool):
    f = _program(ops, rnp)
    fn = lowered(f, S(("n", "m"), "float32"))
    check_plan(fn, plan_memory(fn))
    x = np.random.default_rng(n * m).uniform(-1, 1, (n, m)).astype(np.float32)
    want = _program(ops, np)(x)
    old = runner_memory.POOL_MIN_BYTES
    runner_memory.POOL_MIN_BYTES = 4 if small_pool else old     # 4: nearly everything pooled
    try:
        jf = rj.jit(f, pipeline=[legalize])
        got = jf(x)
    finally:
        runner_memory.POOL_MIN_BYTES = old
    assert_same(got, want, rtol=1e-4, atol=1e-4)
    again = jf(x[::-1].copy())
    assert_same(got, want, rtol=1e-4, atol=1e-4)          # the first results are intact
    assert_same(again, _program(ops, np)(x[::-1].copy()), rtol=1e-4, atol=1e-4)


@given(n=st.integers(0, 1 << 30))
@settings(max_examples=200, deadline=None)
def test_size_classes_round_up_by_at_most_an_eighth(n):
    c = buffer_pool.size_class(n)
    assert n <= c <= max(n, 4096) * 1.125 + 1
    assert buffer_pool.size_class(c) == c                  # a class is its own class


def test_nearby_sizes_share_pooled_blocks():
    """A ragged batch's packed rows change size every batch: requests within one size class
    reuse the block returned (a view of the size asked; the whole block goes back)."""
    pool = buffer_pool.BufferPool(max_bytes=64 << 20)
    a = pool.new(10_000_000)
    assert a.nbytes == 10_000_000 and a.__array_interface__["data"][0] % 64 == 0
    pool.put(a)
    b = pool.take(10_300_000)                          # same class: a hit
    assert b is not None and b.nbytes == 10_300_000
    assert b.__array_interface__["data"][0] == a.__array_interface__["data"][0]
    pool.put(b)
    assert pool.stats()["bytes"] == buffer_pool.size_class(10_000_000)
    assert pool.take(20_000_000) is None                # another class: a miss
