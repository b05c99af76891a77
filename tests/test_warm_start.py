"""Warm start: a fresh process with a warm persistent cache traces, keys and loads the whole
LLVM executable (host plan, per-call Python and native segments) as one entry keyed by the
traced program, without the pass pipeline, memory planning or LLVM emission.  Entries that
do not load are rebuilt and rewritten; another program, another relaxjax source or a
setting that turns the cache off never reads an entry.

Every test uses its own cache directory; processes are started with ``RELAXJAX_CACHE_DIR``
pointing there."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax import cache
from relaxjax.backends.llvm import blas_threads, engine, stored, target

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(target.linker() is None, reason="no linker: CPU code is not cached")

# Three programs: a plain one (gemm, several kernels), a native fori_loop (its body a region
# executable stored inside its parent's) and one traced under automatic-mode guards (x + y
# broadcasts: a y of one row traces a second entry).  The child compares each with NumPy.
PROGRAMS = textwrap.dedent("""
    import json, sys
    import numpy as np
    import relaxjax as rj, relaxjax.numpy as rnp
    from relaxjax import cache

    def mlp(x, w, b):
        h = x @ w + b
        return 0.5 * h * (1.0 + rnp.tanh(0.79788456 * (h + 0.044715 * h ** 3)))

    def body(i, c):
        return c * 0.5 + rnp.sin(c) * i.astype(c.dtype)

    def loop(x, n):
        return rj.lax.fori_loop(0, n.shape[0], body, x)

    def guarded(x, y):
        return rnp.tanh(x + y) * x.shape[0]

    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    w = rng.standard_normal((8, 6)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    ok = {}
    h = x @ w + b
    ok["mlp"] = bool(np.allclose(rj.jit(mlp)(x, w, b),
                                 0.5 * h * (1.0 + np.tanh(0.79788456 * (h + 0.044715 * h ** 3))),
                                 rtol=1e-5, atol=1e-6))
    c = np.linspace(-1, 1, 12).reshape(3, 4)
    ref = c.copy()
    for i in range(6):
        ref = ref * 0.5 + np.sin(ref) * i
    ok["loop"] = bool(np.allclose(rj.jit(loop)(c, np.zeros(6)), ref))
    g = rj.jit(guarded)
    y = np.linspace(0.0, 1.0, 4)[None]
    ok["guarded"] = bool(np.allclose(g(c, y), np.tanh(c + y) * 3)) and \\
        bool(np.allclose(g(c, c), np.tanh(c + c) * 3)) and g.cache_info().compiles == 2
    print(json.dumps({"ok": ok, "stats": cache.stats()}))
""")

# With RJ_TEST_REFUSE set, every stage that builds an executable refuses to run (the same
# script either way: the traced programs record their source lines, part of the key)
REFUSE = textwrap.dedent("""
    import os
    if os.environ.get("RJ_TEST_REFUSE"):
        import llvmlite.binding as llvm
        from relaxjax import jit_cache
        from relaxjax.backends import executable
        from relaxjax.backends.llvm import engine, runtime

        def refuse(what):
            def f(*a, **k):
                raise AssertionError(what + " in a warm process")
            return f
        jit_cache.run_pipeline = refuse("the pass pipeline")
        executable.plan_memory = refuse("memory planning")
        runtime.LLVMExecutable._plan = refuse("host planning")
        runtime.LLVMExecutable._module_text = refuse("LLVM emission")
        runtime.LLVMExecutable._runner_source = refuse("generating the per-call Python")
        engine.kernel_code = runtime.kernel_code = refuse("kernel emission")
        llvm.parse_assembly = llvm.create_pass_builder = llvm.create_mcjit_compiler = refuse("LLVM work")
""")
SCRIPT = REFUSE + PROGRAMS


def run(cache_dir, script, extra_env=None):
    env = dict(os.environ, RELAXJAX_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    env.pop("RELAXJAX_CACHE", None)
    env.update(extra_env or {})
    r = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def entries(cache_dir, kind):
    return sorted(p for p in Path(cache_dir).glob(f"{kind}/*") if not p.name.startswith("."))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAXJAX_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("RELAXJAX_CACHE", raising=False)
    monkeypatch.delenv("RELAXJAX_VERIFY", raising=False)
    monkeypatch.delenv("RELAXJAX_DUMP_IR", raising=False)
    return tmp_path


# -- across processes ---------------------------------------------------------------------
def test_warm_process_loads_whole_executables(cache_dir):
    cold = run(cache_dir, SCRIPT)
    assert all(cold["ok"].values()), cold
    assert len(entries(cache_dir, "executable")) == 4        # mlp, loop, guarded twice
    assert not entries(cache_dir, "lowered")                 # (the lowered modules are inside)
    warm = run(cache_dir, SCRIPT, {"RJ_TEST_REFUSE": "1"})
    assert all(warm["ok"].values()), warm
    # one hit per executable, the runtime library, the loop driver and (where NumPy's
    # OpenBLAS takes it) the callback running OpenBLAS's jobs on the OpenMP team; nothing
    # missing or written.  (The generated product mlp's gemm may call loads at a call that
    # reaches it: its 5 x 8 x 6 product is BLAS's, so it never loads.)
    engine.prepare_process()
    hits = 6 + blas_threads.installed()
    assert warm["stats"] == {"hits": hits, "misses": 0, "rejected": 0, "writes": 0, "write_errors": 0}


def test_refusing_child_does_refuse(cache_dir):
    """The warm test's guard works: in a cold process it fails the run."""
    env = dict(os.environ, RELAXJAX_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT), RJ_TEST_REFUSE="1")
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode != 0 and "in a warm process" in r.stderr


def test_other_relaxjax_source_misses(cache_dir):
    run(cache_dir, SCRIPT)
    before = set(entries(cache_dir, "executable"))
    edited = "from relaxjax import cache; cache._SOURCE_DIGEST.append('an edited checkout')\n"
    r = run(cache_dir, edited + SCRIPT[1:])       # (in the place of the script's first empty line)
    assert all(r["ok"].values())
    assert r["stats"]["writes"] >= 4 and r["stats"]["hits"] >= 1      # (the libraries are reused)
    assert len(set(entries(cache_dir, "executable")) - before) == 4
    assert run(cache_dir, SCRIPT)["stats"]["writes"] == 0       # the unedited one still hits


LIBRARY = textwrap.dedent("""
    import ctypes, json, sys
    import numpy as np
    import relaxjax as rj
    from relaxjax import cache
    from relaxjax.library import NATIVE_SIGNATURE

    def negate(x, out):
        out[...] = -x

    @NATIVE_SIGNATURE
    def native_negate(data, shapes, ndims, nargs):
        size = int(np.prod([shapes[i] for i in range(ndims[0])]))
        x = np.ctypeslib.as_array(ctypes.cast(data[0], ctypes.POINTER(ctypes.c_double)), (size,))
        out = np.ctypeslib.as_array(ctypes.cast(data[1], ctypes.POINTER(ctypes.c_double)), (size,))
        out[:] = -x
        return 0

    rj.register_library("test.negate", cpu=native_negate if sys.argv[1] == "native" else negate,
                        out_dtypes=["float64"])
    f = rj.jit(lambda x: rj.call_library("test.negate", x + 1.0, out=rj.ShapeDtypeStruct(x.shape, x.dtype)) * 2.0)
    x = np.arange(6.0).reshape(2, 3)
    print(json.dumps({"ok": bool(np.array_equal(f(x), -(x + 1) * 2)), "stats": cache.stats()}))
""")


def test_library_registered_otherwise_is_not_loaded(cache_dir):
    """A plan that calls a library function from Python is not loaded in a process that
    registers it natively (the key names the function, not its implementation)."""
    def run_with(kind):
        env = dict(os.environ, RELAXJAX_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
        r = subprocess.run([sys.executable, "-c", LIBRARY, kind], env=env, cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])
    assert run_with("python")["ok"] and len(entries(cache_dir, "executable")) == 1
    assert run_with("python")["stats"]["writes"] == 0                # loaded
    native = run_with("native")
    assert native["ok"] and native["stats"]["hits"] >= 1             # read, refused, rebuilt


# -- in one process -------------------------------------------------------------------------
def _exe_stats(fn, *args):
    before = cache.stats()
    compiled = rj.jit(fn).lower(*args).compile()
    after = cache.stats()
    return compiled, {k: after[k] - before[k] for k in after}


def test_stored_executable_matches_the_built_one(cache_dir):
    def f(x, w):
        h = rnp.tanh(x @ w + 1.0) * rnp.exp(-x[:, :1])
        return h.sum(axis=0), h * 2.0
    rng = np.random.default_rng(2)
    x = rng.standard_normal((20, 6)).astype(np.float32)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    built, d = _exe_stats(f, x, w)
    assert d["writes"] >= 1 and built._entry.executable._llvm_ir is not None
    loaded, d = _exe_stats(f, x, w)
    assert d["writes"] == 0 and d["hits"] == 1
    exe = loaded._entry.executable
    assert exe._llvm_ir is None                      # nothing emitted to load it
    for a, b in zip(loaded(x, w), built(x, w)):
        np.testing.assert_array_equal(a, b)
    # inspection emits the text again, identical to the built one's
    for stage in ("optimized", "loops", "memory", "host", "llvm", "llvm-optimized", "asm"):
        assert loaded.as_text(stage) == built.as_text(stage), stage
    assert loaded.memory_stats()["intermediate_storages"] == built.memory_stats()["intermediate_storages"]


def test_other_program_does_not_hit(cache_dir):
    x = np.linspace(0, 1, 9).astype(np.float32)
    a = rj.jit(lambda x: x * 2.0 + 1.0)
    b = rj.jit(lambda x: x * 3.0 + 1.0)
    np.testing.assert_allclose(a(x), x * 2.0 + 1.0, rtol=1e-6)
    np.testing.assert_allclose(b(x), x * 3.0 + 1.0, rtol=1e-6)
    np.testing.assert_allclose(a(x.astype(np.float64)), x * 2.0 + 1.0, rtol=1e-6)
    assert len(entries(cache_dir, "executable")) == 3


@pytest.mark.parametrize("damage", ["not-a-pickle", "flip", "library"])
def test_damaged_executable_entry_is_rebuilt_and_rewritten(cache_dir, damage):
    def f(x):
        return rnp.sin(x) * 2.0 + x.shape[0]
    x = np.linspace(-1, 1, 7)
    rj.jit(f)(x)
    (p,) = entries(cache_dir, "executable")
    good = p.read_bytes()
    if damage == "not-a-pickle":                # intact file, payload that does not load
        bad = b"not a pickle"
        p.write_bytes(bad + cache._trailer(bad, bytes.fromhex(p.name)))
    elif damage == "flip":                      # fails the checksum
        blob = bytearray(good)
        blob[len(blob) // 3] ^= 0xFF
        p.write_bytes(bytes(blob))
    else:                                       # valid pickle, a library that does not load
        state = pickle.loads(good[:len(good) - cache._TRAILER.size])
        _, _, names = state["library"]
        state["library"] = ("0" * 64, b"\x7fELF but not really a library", names)
        bad = pickle.dumps(state, protocol=5)
        p.write_bytes(bad + cache._trailer(bad, bytes.fromhex(p.name)))
    damaged = p.read_bytes()
    rejected = cache.stats()["rejected"]
    np.testing.assert_allclose(rj.jit(f)(x), np.sin(x) * 2.0 + 7, rtol=1e-12)
    assert cache.stats()["rejected"] == rejected + (damage == "flip")
    blob = p.read_bytes()                                       # rewritten, valid
    assert blob != damaged and cache._check(blob, bytes.fromhex(p.name)) is None
    state = pickle.loads(blob[:len(blob) - cache._TRAILER.size])
    assert state["library"][0] != "0" * 64
    loaded, d = _exe_stats(f, x)                                # and it loads
    assert d["writes"] == 0 and loaded._entry.executable._llvm_ir is None
    np.testing.assert_allclose(loaded(x), np.sin(x) * 2.0 + 7, rtol=1e-12)


@pytest.mark.parametrize("setting", [("RELAXJAX_CACHE", "0"), ("RELAXJAX_VERIFY", "1"),
                                     ("RELAXJAX_DUMP_IR", "1")])
def test_settings_that_skip_stored_executables(cache_dir, monkeypatch, setting):
    """With the cache off, or IR dumps or verification asked for, the pipeline runs and
    nothing is loaded from (or stored as) an executable entry."""
    def f(x):
        return rnp.exp(x) - 1.0
    x = np.linspace(-1, 1, 5).astype(np.float32)
    rj.jit(f)(x)                                       # stored
    (p,) = entries(cache_dir, "executable")
    loads = []
    real_load = stored.load
    monkeypatch.setattr(stored, "load", lambda *a: loads.append(1) or real_load(*a))
    rj.jit(f).lower(x).compile()                       # (the patch counts loads)
    assert loads == [1]
    monkeypatch.setenv(*setting)
    compiled = rj.jit(f).lower(x).compile()
    np.testing.assert_allclose(compiled(x), np.exp(x) - 1.0, rtol=1e-6)
    assert loads == [1] and compiled._entry.executable._llvm_ir is not None     # built
    assert entries(cache_dir, "executable") == [p] and not entries(cache_dir, "lowered")


def test_native_library_calls_are_stored_and_loaded(cache_dir):
    """Segments call native library functions (LAPACK here) through pointers their module
    holds, set at load: the executable is stored like any other, and one loaded from its
    entry calls the function (the pointer set again in the loading process); a stored
    executable whose library function was registered again since is refused (rebuilt)."""
    inv = rj.jit(lambda a: rnp.linalg.inv(a) + 1.0)
    a = np.eye(3) * 2.0
    np.testing.assert_allclose(inv(a), np.linalg.inv(a) + 1.0)
    exe = inv.lower(a).compile()._entry.executable
    data = stored.dump(exe)
    assert data is not None and exe.natives and len(entries(cache_dir, "executable")) == 1
    loaded = stored.load(type(exe), data)
    b = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.5], [0.0, 0.5, 2.0]])
    out = loaded({d.name: 3 for d in loaded.fn.dim_vars}, [b])      # every dim is 3 here
    np.testing.assert_allclose(out[0], np.linalg.inv(b) + 1.0, rtol=1e-12)
    state = pickle.loads(data)
    (sym, name), = state["natives"].items()
    state["natives"] = {sym.rsplit(".v", 1)[0] + ".v999": name}     # made for another registration
    with pytest.raises(ValueError, match="registered otherwise"):
        stored.load(type(exe), pickle.dumps(state))


def test_shared_library_is_shared_between_loaded_executables(cache_dir):
    """Two executables of one program in a process share its live library (dedup by the
    text's digest, as compiled ones do)."""
    f = lambda x: rnp.cos(x) + 0.5      # noqa: E731
    x = np.ones(4, np.float32)
    a = rj.jit(f).lower(x).compile()
    b = rj.jit(f).lower(x).compile()
    c = rj.jit(f).lower(x).compile()
    assert b._entry.executable._llvm_ir is None and c._entry.executable._llvm_ir is None
    mods = {id(e._entry.executable.segment_module) for e in (a, b, c)}
    assert len(mods) == 1 and isinstance(a._entry.executable.segment_module, engine.SharedModule)
