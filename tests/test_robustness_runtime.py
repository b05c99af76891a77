"""Issue 16, the runtime layer: nothing wrong, nothing lost, nothing crashes.  Each test is
a fault that once gave a wrong answer, a crash or a hang: compiled code indexing with data,
reductions without identity over a dim that is empty at run time, library callbacks
re-registered or re-entering, fork after a parallel kernel, and cache files changed under a
running process.  Faults that crash or hang run in a subprocess with a timeout, so a
regression fails its test instead of the suite."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import relaxjax as rj
import relaxjax.numpy as rnp

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str, cache_dir=None, timeout: float = 60, limit_memory: bool = False):
    """Run ``code`` in a fresh interpreter (its own cache directory when given); returns the
    CompletedProcess.  ``limit_memory`` caps the address space at 8 GiB, so code that reads
    without end fails instead of exhausting the machine."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("RELAXJAX_CACHE", None)
    if cache_dir is not None:
        env["RELAXJAX_CACHE_DIR"] = str(cache_dir)

    def cap():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          preexec_fn=cap if limit_memory else None)


def cache_entries(cache_dir) -> list:
    return sorted(p for p in Path(cache_dir).glob("*/*") if not p.name.startswith("."))


# A parallel-sized elementwise function: compiles to a shared library in the cache
PARALLEL_SCRIPT = """
import numpy as np, relaxjax as rj
f = rj.jit(lambda x: x * 2.0 + 1.0)
x = np.arange(1 << 18, dtype=np.float32)
from relaxjax.backends.llvm import engine
engine._set_global("rj_serial_until", 0)    # (a busy machine may have paused the team)
"""


# -- fork after a parallel kernel (issue 16, item 10) --------------------------------------
def test_forked_child_runs_kernels_after_the_parent_ran_a_parallel_one():
    r = run_python(PARALLEL_SCRIPT + """
import os
assert f(x)[3] == 7.0                      # the parent's OpenMP team is running now
engine._set_global("rj_serial_until", 0)    # (the child must not inherit a busy pause)
pid = os.fork()
if pid == 0:
    ok = float(f(x + 1.0)[5]) == 13.0 and float(f(x)[-1]) == 2.0 * x[-1] + 1.0
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
""", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == "0"


def test_multiprocessing_pool_with_fork_computes_after_a_parallel_kernel():
    r = run_python(PARALLEL_SCRIPT + """
import multiprocessing as mp
def work(k):
    return float(f(x + k)[1])
f(x)
engine._set_global("rj_serial_until", 0)
with mp.get_context("fork").Pool(2) as pool:
    print(pool.map(work, [0, 1, 2]))
""", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[-2] == "[3.0, 5.0, 7.0]"


# -- cache files changed under a process (items 11 and 12) ---------------------------------
def test_cache_file_truncated_in_place_does_not_crash_a_loaded_function(tmp_path):
    r = run_python(PARALLEL_SCRIPT + f"""
import os, glob
assert f(x)[2] == 5.0
for p in glob.glob({str(tmp_path)!r} + "/*/*"):
    os.truncate(p, 0)                       # another process empties the entries in place
print(float(f(x)[4]), float(f(x[:100])[99]))
""", cache_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["9.0", "199.0"]


def _populate(cache_dir) -> list:
    r = run_python(PARALLEL_SCRIPT + "print(float(f(x)[1]))", cache_dir=cache_dir)
    assert r.returncode == 0 and r.stdout.split() == ["3.0"], r.stderr
    paths = cache_entries(cache_dir)
    assert paths
    return paths


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_cache_entry_that_is_not_a_regular_file_is_a_miss(tmp_path, kind):
    for p in _populate(tmp_path):
        p.unlink()
        if kind == "fifo":
            os.mkfifo(p)
        else:
            p.symlink_to("/dev/zero")
    r = run_python(PARALLEL_SCRIPT + "print(float(f(x)[1]))", cache_dir=tmp_path,
                   timeout=60, limit_memory=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["3.0"]


def test_cache_read_refuses_special_files_and_oversized_entries(tmp_path, monkeypatch):
    from relaxjax import cache
    monkeypatch.setenv("RELAXJAX_CACHE_DIR", str(tmp_path))
    parts = ("text",)
    path = Path(cache.put("llvm", parts, b"payload", ".so"))
    assert cache.get("llvm", parts, ".so") == b"payload"
    monkeypatch.setattr(cache, "MAX_ENTRY_BYTES", 8)
    assert cache.get("llvm", parts, ".so") is None           # larger than the limit
    monkeypatch.undo()
    monkeypatch.setenv("RELAXJAX_CACHE_DIR", str(tmp_path))
    path.unlink()
    os.mkfifo(path)
    assert cache.get("llvm", parts, ".so") is None           # and returns at once
    assert cache.put("llvm", parts, b"again", ".so") == str(path)
    assert cache.get("llvm", parts, ".so") == b"again"


# -- reductions without identity over an axis empty at run time (item 6) -------------------
RUN_BACKENDS = ["llvm", "numpy", "cuda-emulated"]
NO_IDENTITY = [
    (lambda x: x[x > 0].max(), lambda x: x[x > 0].max()),
    (lambda x: x[x > 0].min(), lambda x: x[x > 0].min()),
    (lambda x: rnp.argmax(x[x > 0]), lambda x: np.argmax(x[x > 0])),
    (lambda x: rnp.argmin(x[x > 0]), lambda x: np.argmin(x[x > 0])),
    (lambda x: rnp.max(rnp.exp(x[x > 0]) * 2.0), lambda x: np.max(np.exp(x[x > 0]) * 2.0)),  # fused
    (lambda x: rnp.min(x[x > 0].reshape(-1, 1) + 1.0, axis=0), lambda x: np.min(x[x > 0].reshape(-1, 1) + 1.0, axis=0)),
]


def _outcome(fn, *args):
    try:
        return np.asarray(fn(*args))
    except ValueError as e:
        return ("ValueError", str(e))


@pytest.mark.parametrize("backend", RUN_BACKENDS)
@pytest.mark.parametrize("k", range(len(NO_IDENTITY)))
def test_reduction_without_identity_over_a_data_dependent_empty_axis_raises(backend, k):
    fn, ref = NO_IDENTITY[k]
    f = rj.jit(fn, backend=backend)
    for x in (np.array([3.0, -1.0, 5.0, 2.0]), -np.ones(4), np.array([0.5, -2.0])):
        want, got = _outcome(ref, x), _outcome(f, x)
        if isinstance(want, tuple):
            assert got == want
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("backend", RUN_BACKENDS)
def test_reduction_over_a_dim_declared_possibly_empty_raises_at_zero(backend):
    p = rj.dim("p", min=0)
    for name in ("max", "min", "argmax", "argmin"):
        f = rj.jit(getattr(rnp, name), backend=backend, shapes=[rj.ShapeDtypeStruct((p,), "float64")])
        assert f(np.array([2.0, 7.0, 1.0])) == getattr(np, name)(np.array([2.0, 7.0, 1.0]))
        with pytest.raises(ValueError) as got:
            f(np.ones(0))
        with pytest.raises(ValueError) as want:
            getattr(np, name)(np.ones(0))
        assert str(got.value) == str(want.value)
    g = rj.jit(lambda x: rnp.max(x, axis=1), backend=backend,
               shapes=[rj.ShapeDtypeStruct((p, 3), "float64")])
    assert g(np.ones((0, 3))).shape == (0,)                   # the reduced axis is not empty


# -- library callbacks: re-registered (item 8), re-entered (item 9) ------------------------
def test_reregistering_a_native_library_function_keeps_compiled_code_safe():
    r = run_python("""
import ctypes, gc, numpy as np, relaxjax as rj
from relaxjax.library import NATIVE_SIGNATURE

def native(add):
    def fn(data, shapes, ndims, nargs):
        n = shapes[0]
        x = (ctypes.c_double * n).from_address(data[0])
        out = (ctypes.c_double * n).from_address(data[1])
        for i in range(n):
            out[i] = x[i] + add
        return 0
    return NATIVE_SIGNATURE(fn)

rj.register_library("rt.addk", cpu=native(1.0), num_outputs=1)
f = rj.jit(lambda x: rj.call_library("rt.addk", x * 1.0, out=rj.ShapeDtypeStruct(x.shape, x.dtype)),
           backend="llvm")
x = np.arange(5.0)
assert (f(x) == x + 1).all()
rj.register_library("rt.addk", cpu=native(2.0), num_outputs=1)
for _ in range(3):
    gc.collect()
    junk = [NATIVE_SIGNATURE(lambda *a: 7) for _ in range(50)]    # reuse freed memory
old = f(x)
g = rj.jit(lambda x: rj.call_library("rt.addk", x * 1.0, out=rj.ShapeDtypeStruct(x.shape, x.dtype)),
           backend="llvm")
print(old.tolist(), g(x).tolist())
""")
    assert r.returncode == 0, r.stderr
    old, new = r.stdout.strip().split("] [")
    # compiled code keeps calling the implementation it was compiled with (see register_library)
    assert old == "[1.0, 2.0, 3.0, 4.0, 5.0" and new == "2.0, 3.0, 4.0, 5.0, 6.0]"


@pytest.mark.parametrize("backend", ["llvm", "numpy"])
def test_function_with_bounded_dims_reentered_from_its_library_callback(backend):
    n = rj.dim("n", max=64)
    depth = []

    def callback(a, out):
        if not depth:                     # once: the same function again, on other data
            depth.append(1)
            inner = f(np.full(a.shape, 3.0))
            out[...] = a + inner
            depth.pop()
        else:
            out[...] = a

    name = f"rt.reenter.{backend}"
    rj.register_library(name, cpu=callback, num_outputs=1)

    def body(x):
        a = rnp.exp(x) * 2.0                                   # an intermediate in the workspace
        b = rj.call_library(name, a, out=rj.ShapeDtypeStruct(x.shape, x.dtype))
        return rnp.sin(a) * b + a                              # read after the callback

    f = rj.jit(body, backend=backend, shapes=[rj.ShapeDtypeStruct((n,), "float64")])
    x = np.linspace(-1.0, 1.0, 16)

    def ref(x, nested):
        a = np.exp(x) * 2.0
        b = a + ref(np.full(x.shape, 3.0), False) if nested else a
        return np.sin(a) * b + a
    for _ in range(2):
        np.testing.assert_allclose(f(x), ref(x, True), rtol=1e-12)


# -- user kernels indexing with data (item 4) ----------------------------------------------
S = rj.ShapeDtypeStruct


@rj.kernel
def scatter_k(idx: rj.Buffer[("n",), "int64"], v: rj.Buffer[("n",), "float32"],
              out: rj.Buffer[("k",), "float32"]):
    for b in range(out.shape[0]):
        out[b] = 0.0
    for i in range(idx.shape[0]):
        out[idx[i]] = v[i]


@rj.kernel
def gather_k(x: rj.Buffer[("k", "m"), "float32"], idx: rj.Buffer[("n",), "int32"],
             out: rj.Buffer[("n", "m"), "float32"]):
    for i, j in rj.grid(idx.shape[0], x.shape[1]):
        r = idx[i] + 0                    # through a local
        out[i, j] = x[r, j] * 2.0


KERNEL_CASES = {
    "scatter": (lambda i, v: rj.call_tir(scatter_k, i, v, out=S((8,), "float32")),
                lambda bad, n: (np.array(bad, np.int64), np.ones(len(bad), np.float32))),
    "gather": (lambda x, i: rj.call_tir(gather_k, x, i, out=S((i.shape[0], x.shape[1]), "float32")),
               lambda bad, n: (np.arange(8 * 3, dtype=np.float32).reshape(8, 3),
                               np.resize(np.array(bad, np.int32), n))),
}


def _raised(fn, *args):
    try:
        return ("ok", np.asarray(fn(*args)).tolist())
    except IndexError as e:
        return ("IndexError", str(e))


@pytest.mark.parametrize("backend", ["llvm", "cuda-emulated"])
@pytest.mark.parametrize("case", sorted(KERNEL_CASES))
def test_kernel_index_read_from_data_is_checked(backend, case):
    fn, make = KERNEL_CASES[case]
    f = rj.jit(fn, backend=backend)
    for bad, n in (([1, 3, 5], 3), ([1, 8, 2], 3), ([0, -1, 2], 3), ([2, 1 << 40, 0], 3),
                   ([7, 9], 1 << 17)):                    # many rows: a parallel loop
        if case == "scatter" and n > 3:
            continue
        if case == "gather" and bad[1] == 1 << 40:
            bad = [2, 1 << 30, 0]                         # (int32 indices)
        args = make(bad, n)
        want = _raised(fn, *args)                         # eager: the reference interpreter
        assert _raised(f, *args) == want
        assert want[0] == ("ok" if max(bad) < 8 and min(bad) >= 0 else "IndexError")


# -- a kernel output it does not fully write reads 0 everywhere (moderate) -----------------
@rj.kernel
def first_half(x: rj.Buffer[("n",), "float32"], out: rj.Buffer[("n",), "float32"],
               count: rj.Buffer[("n",), "int32"]):
    for i in range(x.shape[0] // 2):
        out[i] = x[i]
        count[i] = 1


@pytest.mark.parametrize("backend", ["eager", "llvm", "numpy", "cuda-emulated"])
def test_kernel_outputs_it_does_not_write_are_zeros(backend):
    def fn(x):
        return rj.call_tir(first_half, x, out=[S(x.shape, "float32"), S(x.shape, "int32")])
    f = fn if backend == "eager" else rj.jit(fn, backend=backend)
    for n in (7, 1 << 17):
        junk = np.full(n, 5.0, np.float32)            # leaves non-zero memory to be reused
        del junk
        out, count = f(np.ones(n, np.float32))
        np.testing.assert_array_equal(out, np.where(np.arange(n) < n // 2, 1.0, 0.0))
        np.testing.assert_array_equal(count, np.arange(n) < n // 2)


# -- a Python library callback cannot write into the caller's input (moderate) -------------
@pytest.mark.parametrize("backend", ["eager", "llvm", "numpy", "cuda-emulated"])
def test_python_library_callback_gets_read_only_inputs(backend):
    def sneaky(a, out):
        out[...] = a + 1.0
        a[0] = 99.0                       # inputs are read-only: a ValueError

    name = f"rt.sneaky.{backend}"
    rj.register_library(name, cpu=sneaky, num_outputs=1)

    def fn(x):
        return rj.call_library(name, x, out=rj.ShapeDtypeStruct(x.shape, x.dtype))
    f = fn if backend == "eager" else rj.jit(fn, backend=backend)
    x = np.arange(4.0)
    with pytest.raises(ValueError, match="read-only"):
        f(x)
    np.testing.assert_array_equal(x, np.arange(4.0))


# -- the output pool stays bounded when shapes keep changing (moderate) --------------------
def test_buffer_pool_keeps_recent_sizes_within_its_bound():
    from relaxjax.backends.llvm import buffer_pool
    # the process pool: 1/16 of physical memory within [256 MiB, 2 GiB]
    assert 256 << 20 <= buffer_pool.POOL.max_bytes == buffer_pool.default_pool_bytes() <= 2 << 30
    pool = buffer_pool.BufferPool(max_per_size=4, max_bytes=4 << 20)
    for k in range(4):                                    # sizes never asked for again
        pool.put(buffer_pool._aligned_block((1 << 20) - 64 * (k + 1)))
    for k in range(50):                                   # a shape that changes every call
        n = (1 << 20) + 64 * k
        assert pool.take(n) is None
        pool.put(buffer_pool._aligned_block(n))
        assert pool.take(n) is not None                   # the new size is kept, old ones go
        pool.put(buffer_pool._aligned_block(n))
        assert pool.stats()["bytes"] <= 4 << 20
    assert pool.stats()["blocks"] <= 4 and len(pool._free) <= 4



# -- entries for one set of concrete shapes: found by key, bounded (moderate) --------------
@pytest.mark.parametrize("fast", [True, False])
def test_concrete_shape_entries_are_looked_up_by_key_and_bounded(monkeypatch, fast):
    import importlib
    monkeypatch.setattr(importlib.import_module("relaxjax.jit"), "MAX_EXACT_ENTRIES", 8)
    f = rj.jit(lambda x: x * float(int(x.shape[0])), backend="numpy")
    call = (lambda x: f(x)) if fast else (lambda x: f(x=x))      # (keywords: the full path)
    for n in range(1, 21):
        assert call(np.ones(n))[0] == n
    info = f.cache_info()
    assert info.compiles == 20 and info.entries <= 8
    assert not any(f._fast.values()) and not any(f._cache.values())     # nothing to scan
    assert call(np.ones(20))[0] == 20 and f.cache_info().compiles == 20  # a hit
    assert call(np.ones(1))[0] == 1 and f.cache_info().compiles == 21   # dropped: traced again


# -- compiled code of dropped functions is released (moderate) -----------------------------
def test_dropped_functions_release_their_compiled_code():
    import gc
    import weakref

    def modules_of(fn) -> list:
        exe = next(e for es in fn._cache.values() for e in es).executable
        return [weakref.ref(exe.segment_module)]

    x = np.arange(5, dtype=np.float32)
    f = rj.jit(lambda x: x * 3.0 + 0.5, backend="llvm")
    g = rj.jit(lambda x: x * 3.0 + 0.5, backend="llvm")       # the same code: shared modules
    np.testing.assert_array_equal(f(x), x * 3.0 + 0.5)
    np.testing.assert_array_equal(g(x), x * 3.0 + 0.5)
    mods = modules_of(f)
    assert [r() for r in mods] == [r() for r in modules_of(g)]
    del f
    gc.collect()
    assert all(r() is not None for r in mods)                 # g still uses them
    np.testing.assert_array_equal(g(x + 1), (x + 1) * 3.0 + 0.5)
    del g
    gc.collect()
    assert all(r() is None for r in mods)                     # released with the last user
    h = rj.jit(lambda x: x * 3.0 + 0.5, backend="llvm")       # loaded again when needed
    np.testing.assert_array_equal(h(x), x * 3.0 + 0.5)
