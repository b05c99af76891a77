"""The persistent cache of compiled code: the storage API, shared libraries loaded by a new
process without LLVM work, concurrent writers, damaged or foreign entries, and the
``clear_cache`` / ``python -m relaxjax cache`` commands.

Every test uses its own cache directory (``tmp_path``); processes are started with
``RELAXJAX_CACHE_DIR`` pointing there."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax import cache
from relaxjax.backends.llvm import engine, target

ROOT = Path(__file__).resolve().parent.parent

needs_linker = pytest.mark.skipif(target.linker() is None, reason="no linker: CPU code is not cached")

# A workload touching everything a cached library must resolve at load time: BLAS sgemm and
# dgemm (function pointers), libmvec math, OpenMP threads and the runtime globals, several
# kernels called from one segment.
SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import relaxjax as rj, relaxjax.numpy as rnp
    from relaxjax import cache
    from relaxjax.backends.llvm import engine, set_parallel_threshold
    set_parallel_threshold(1)

    @rj.jit
    def mlp(x, w1, b1, w2):
        h = x @ w1 + b1
        h = 0.5 * h * (1.0 + rnp.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))
        return rnp.exp(h @ w2) * 0.5

    @rj.jit
    def dmm(a, b):
        return rnp.sin(a @ b)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((33, 16)).astype(np.float32)
    w1 = rng.standard_normal((16, 40)).astype(np.float32) * 0.3
    b1 = rng.standard_normal(40).astype(np.float32)
    w2 = rng.standard_normal((40, 8)).astype(np.float32) * 0.3
    h = x @ w1 + b1
    h = 0.5 * h * (1.0 + np.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))
    ok = bool(np.allclose(mlp(x, w1, b1, w2), np.exp(h @ w2) * 0.5, rtol=1e-4, atol=1e-5))
    ok &= bool(np.allclose(mlp(x[:5], w1, b1, w2), (np.exp(h @ w2) * 0.5)[:5], rtol=1e-4, atol=1e-5))
    a, b = rng.standard_normal((7, 9)), rng.standard_normal((9, 3))
    ok &= bool(np.allclose(dmm(a, b), np.sin(a @ b)))
    mods = [m for m in engine._ENGINES.values()]
    print(json.dumps({"ok": ok, "stats": cache.stats(),
                      "native": all(isinstance(m, engine.SharedModule) for m in mods),
                      "from_cache": [getattr(m, "from_cache", None) for m in mods]}))
""")


def run_script(cache_dir, extra_env=None, wait=True):
    env = dict(os.environ, RELAXJAX_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    env.pop("RELAXJAX_CACHE", None)
    env.update(extra_env or {})
    p = subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    if not wait:
        return p
    return finish(p)


def finish(p):
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def entries(cache_dir, kind=None):
    root = Path(cache_dir)
    return sorted(p for p in root.glob(f"{kind or '*'}/*") if not p.name.startswith("."))


def all_valid(cache_dir):
    for p in entries(cache_dir):
        blob = p.read_bytes()
        assert cache._check(blob, bytes.fromhex(p.name[:64])) is None, p


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAXJAX_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("RELAXJAX_CACHE", raising=False)
    return tmp_path


# -- the storage API ---------------------------------------------------------------------
def test_put_get_roundtrip(cache_dir):
    parts = ("some code", ("sm_90", 13), 7, None, b"\x00\x01")
    assert cache.get("cubin", parts) is None
    path = cache.put("cubin", parts, b"payload bytes")
    assert path == str(cache.path_for("cubin", parts)) and Path(path).parent == cache_dir / "cubin"
    assert cache.get("cubin", parts) == b"payload bytes"
    assert cache.get_path("cubin", parts) == path
    assert open(path, "rb").read().startswith(b"payload bytes")     # payload at offset 0
    assert cache.get("cubin", parts[:-1]) is None
    assert cache.get("ptx", parts) is None                          # kinds are separate
    cache.put("cubin", parts, b"")                                  # empty payloads are fine
    assert cache.get("cubin", parts) == b""


def test_key_is_unambiguous():
    assert cache.key("k", ("ab", "c")) != cache.key("k", ("a", "bc"))
    assert cache.key("k", ("1",)) != cache.key("k", (1,))
    assert cache.key("k", (("a",), "b")) != cache.key("k", ("a", "b"))
    assert cache.key("k", ("a",)) == cache.key("k", ["a"])
    with pytest.raises(ValueError):
        cache.key("../x", ())
    with pytest.raises(TypeError):
        cache.key("k", (1.5,))


def test_cache_off(cache_dir, monkeypatch):
    monkeypatch.setenv("RELAXJAX_CACHE", "0")
    assert not cache.enabled()
    assert cache.put("x", ("a",), b"data") is None
    assert cache.get("x", ("a",)) is None and not list(cache_dir.iterdir())
    f = rj.jit(lambda x: rnp.exp(x) + 1.0)
    np.testing.assert_allclose(f(np.ones(4, np.float32)), np.exp(1.0) + 1.0, rtol=1e-6)
    assert not list(cache_dir.iterdir())                    # nothing written
    assert not f.lower(np.ones(4, np.float32)).compile()._entry.executable.native


@pytest.mark.parametrize("damage", ["truncate", "truncate-trailer", "flip-payload", "flip-trailer", "empty",
                                    "garbage"])
def test_damaged_entry_is_ignored(cache_dir, damage):
    parts = ("text",)
    path = Path(cache.put("x", parts, bytes(range(256)) * 40))
    blob = bytearray(path.read_bytes())
    if damage == "truncate":
        blob = blob[:5000]
    elif damage == "truncate-trailer":
        blob = blob[:-3]
    elif damage == "flip-payload":
        blob[1234] ^= 0x10
    elif damage == "flip-trailer":
        blob[-60] ^= 0x01
    elif damage == "empty":
        blob = b""
    else:
        blob = os.urandom(len(blob))
    path.write_bytes(bytes(blob))
    before = cache.stats()["rejected"]
    assert cache.get("x", parts) is None and cache.get_path("x", parts) is None
    assert cache.stats()["rejected"] == before + 2
    cache.put("x", parts, b"fresh")                       # the next put replaces it
    assert cache.get("x", parts) == b"fresh"


def test_other_version_is_ignored(cache_dir, monkeypatch):
    parts = ("text",)
    path = Path(cache.put("x", parts, b"payload"))
    blob = bytearray(path.read_bytes())
    # the trailer's version field (16 bytes, 28 from the end) as another release wrote it
    off = len(blob) - cache._TRAILER.size + 32 + 32 + 8
    blob[off:off + 16] = b"9.9.9".ljust(16, b"\0")
    path.write_bytes(bytes(blob))
    assert cache.get("x", parts) is None
    # and a file of another format version
    monkeypatch.setattr(cache, "FORMAT_VERSION", cache.FORMAT_VERSION + 1)
    blob2 = bytearray(cache._trailer(b"payload", bytes.fromhex(path.name)))
    monkeypatch.undo()
    monkeypatch.setenv("RELAXJAX_CACHE_DIR", str(cache_dir))
    path.write_bytes(b"payload" + bytes(blob2))
    assert cache.get("x", parts) is None
    cache.put("x", parts, b"payload")
    assert cache.get("x", parts) == b"payload"


def test_unwritable_cache_dir_still_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("RELAXJAX_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.delenv("RELAXJAX_CACHE", raising=False)
    assert cache.put("x", ("a",), b"data") is None
    f = rj.jit(lambda x: rnp.cos(x) * 3.0 + 0.25)
    x = np.linspace(0, 1, 37).astype(np.float32)
    np.testing.assert_allclose(f(x), np.cos(x) * 3.0 + 0.25, rtol=1e-6)


# -- info, clear and the command line ------------------------------------------------------
def test_info_and_clear(cache_dir):
    cache.put("a", ("1",), b"x" * 10)
    cache.put("a", ("2",), b"x" * 20)
    cache.put("b", ("1",), b"")
    (cache_dir / "a" / ".tmp-leftover").write_bytes(b"partial")
    (cache_dir / "notes.txt").write_text("not ours")
    (cache_dir / "a" / "README").write_text("not ours either")
    i = cache.info()
    assert i["dir"] == str(cache_dir) and i["entries"] == 3 and i["enabled"]
    assert i["kinds"]["a"]["entries"] == 2 and i["kinds"]["b"]["entries"] == 1
    assert i["bytes"] == 30 + 3 * cache._TRAILER.size
    assert rj.clear_cache() == 3
    assert cache.info()["entries"] == 0
    assert (cache_dir / "notes.txt").exists() and (cache_dir / "a" / "README").exists()
    assert not (cache_dir / "a" / ".tmp-leftover").exists() and not (cache_dir / "b").exists()
    assert rj.clear_cache() == 0


def test_command_line(cache_dir):
    env = dict(os.environ, RELAXJAX_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    cache.put("llvm", ("1",), b"x" * 100)
    cache.put("lowered", ("1",), b"y")

    def cli(*args):
        r = subprocess.run([sys.executable, "-m", "relaxjax", "cache", *args], env=env,
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout
    out = cli("info")
    assert f"directory: {cache_dir}" in out and "entries:   2" in out
    assert f"bytes:     {101 + 2 * cache._TRAILER.size}" in out and "llvm: 1 entries" in out
    assert "removed 2 entries" in cli("clear")
    assert "entries:   0" in cli("info")
    r = subprocess.run([sys.executable, "-m", "relaxjax", "cache"], env=env, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0


# -- compiled code across processes --------------------------------------------------------
@needs_linker
def test_second_process_loads_without_compiling(cache_dir):
    cold = run_script(cache_dir)
    assert cold["ok"] and cold["native"]
    assert cold["stats"]["writes"] > 0 and cold["stats"]["hits"] == 0
    n = len(entries(cache_dir))
    warm = run_script(cache_dir)
    assert warm["ok"] and warm["native"]
    assert warm["from_cache"] and all(warm["from_cache"]), warm
    assert warm["stats"]["writes"] == 0 and warm["stats"]["misses"] == 0 and warm["stats"]["rejected"] == 0
    assert len(entries(cache_dir)) == n
    # one stored executable per function (its lowered module in it), and the libraries
    assert len(entries(cache_dir, "executable")) == 2 and not entries(cache_dir, "lowered")
    assert entries(cache_dir, "llvm")
    all_valid(cache_dir)


@needs_linker
def test_warm_process_does_no_llvm_work(cache_dir):
    run_script(cache_dir)
    env = dict(os.environ, RELAXJAX_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    guard = textwrap.dedent("""
        import llvmlite.binding as llvm
        def refuse(*a, **k):
            raise AssertionError("LLVM work in a warm process")
        llvm.parse_assembly = llvm.create_pass_builder = llvm.create_mcjit_compiler = refuse
    """)
    r = subprocess.run([sys.executable, "-c", guard + SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["ok"]


@needs_linker
def test_concurrent_processes(cache_dir):
    procs = [run_script(cache_dir, wait=False) for _ in range(3)]
    results = [finish(p) for p in procs]
    assert all(r["ok"] and r["native"] for r in results)
    all_valid(cache_dir)
    assert not [p for p in cache_dir.glob("*/.tmp-*")]          # no temporaries left
    again = run_script(cache_dir)
    assert again["ok"] and all(again["from_cache"]) and again["stats"]["writes"] == 0


@needs_linker
@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_entries_are_recompiled(cache_dir, damage):
    run_script(cache_dir)
    files = entries(cache_dir)
    rng = np.random.default_rng(1)
    for p in files:
        blob = bytearray(p.read_bytes())
        if damage == "truncate":
            blob = blob[:len(blob) // 2]
        else:
            for i in rng.integers(0, len(blob) - cache._TRAILER.size, 4):
                blob[i] ^= 0xFF
        p.write_bytes(bytes(blob))
    r = run_script(cache_dir)
    assert r["ok"] and r["native"]
    assert r["stats"]["rejected"] == len(files) and r["stats"]["writes"] == len(files)
    assert not any(r["from_cache"])
    all_valid(cache_dir)
    assert all(run_script(cache_dir)["from_cache"])


@needs_linker
def test_valid_entry_that_does_not_load_is_rebuilt(cache_dir):
    text = "define i64 @rj_test_answer() {\n  ret i64 42\n}\n"
    cache.put("llvm", engine.cache_key_parts(text), b"\x7fELF but not really a library", ".so")
    m = engine.SharedModule(text, [])
    assert not m.from_cache
    assert ctypes.CFUNCTYPE(ctypes.c_int64)(m.address("rj_test_answer"))() == 42
    assert engine.SharedModule(text, []).from_cache


# -- in one process ------------------------------------------------------------------------
@needs_linker
def test_cached_and_in_memory_code_agree(cache_dir, monkeypatch):
    def f(x, w):
        return rnp.tanh(x @ w + 1.0) * rnp.exp(-x[:, :1])
    x = np.random.default_rng(2).standard_normal((20, 6)).astype(np.float32)
    w = np.random.default_rng(3).standard_normal((6, 5)).astype(np.float32)
    native = rj.jit(f).lower(x, w).compile()
    assert native._entry.executable.native
    monkeypatch.setenv("RELAXJAX_CACHE", "0")
    mcjit = rj.jit(f).lower(x, w).compile()
    assert not mcjit._entry.executable.native
    np.testing.assert_array_equal(native(x, w), mcjit(x, w))
    for stage in ("llvm", "optimized", "loops"):
        assert native.as_text(stage) == mcjit.as_text(stage)
    assert "@rj_blas_sgemm = external global ptr" in native.as_text("llvm")
    monkeypatch.delenv("RELAXJAX_CACHE")
    # a module loaded from the cache still shows its optimised IR and assembly
    engine._ENGINES.clear()
    again = rj.jit(f).lower(x, w).compile()
    mods = [again._entry.executable.segment_module]
    assert all(m.from_cache for m in mods)
    assert "define" in again.as_text("llvm-optimized") and "ret" in again.as_text("asm")
    np.testing.assert_array_equal(again(x, w), mcjit(x, w))


@needs_linker
def test_runtime_globals_reach_cached_code(cache_dir):
    rj.jit(lambda x: x + 1.0)(np.ones(3, np.float32))          # loads the runtime library
    lib = engine._RUNTIME[0].lib
    old = engine.NUM_THREADS.value
    try:
        engine.set_num_threads(3)
        assert ctypes.c_int32.in_dll(lib, "rj_num_threads").value == 3
        engine.set_parallel_threshold(12345)
        assert ctypes.c_int64.in_dll(lib, "rj_parallel_min_work").value == 12345
    finally:
        engine.set_num_threads(old)
        engine.set_parallel_threshold(engine.DEFAULT_PARALLEL_MIN_WORK)
    assert ctypes.c_void_p.in_dll(lib, "rj_blas_sgemm").value == target.blas_function("sgemm")


def test_lowered_module_cache(cache_dir):
    """A backend that stores no executable (numpy) gets the lowered module from the cache."""
    def f(x):
        return rj.nn.softmax(x * 2.0, axis=-1)
    x = np.random.default_rng(4).standard_normal((6, 10)).astype(np.float32)
    a = rj.jit(f, backend="numpy").lower(x).compile()
    assert len(entries(cache_dir, "lowered")) == 1 and not entries(cache_dir, "executable")
    hits = cache.stats()["hits"]
    b = rj.jit(f, backend="numpy").lower(x).compile()      # the lowered module comes from the cache
    assert cache.stats()["hits"] == hits + 1
    assert a.as_text("optimized") == b.as_text("optimized")
    np.testing.assert_allclose(b(x), a(x), rtol=1e-6)
    # an entry that is intact but does not unpickle (say, from an incompatible relaxjax
    # checkout) is ignored and rewritten
    p = entries(cache_dir, "lowered")[0]
    good = p.read_bytes()
    bad = b"not a pickle"
    p.write_bytes(bad + cache._trailer(bad, bytes.fromhex(p.name)))
    c = rj.jit(f, backend="numpy").lower(x).compile()
    np.testing.assert_allclose(c(x), a(x), rtol=1e-6)
    assert p.read_bytes() == good


KEY_SCRIPT = textwrap.dedent("""
    import hashlib, pickle
    import numpy as np
    import relaxjax as rj, relaxjax.numpy as rnp
    n = rj.dim("n", min=1, max=4096)
    S = rj.ShapeDtypeStruct
    fns = [
        (lambda x, w: rnp.tanh(x @ w + 1.0), (np.ones((4, 3), np.float32), np.ones((3, 5), np.float32))),
        (lambda x: rj.nn.layer_norm(x) + rj.nn.softmax(x, axis=-1),
         (S((n, 8), "float32"),)),
        (lambda x: rnp.split(x, 3)[0] * x.shape[0], (np.ones((6, 4), np.float32),)),
        (lambda x: x[x > 0] * 2.0, (np.ones((5, 2), np.float32),)),
        (lambda x, y: rnp.concatenate([x, y], axis=0).sum(axis=1), (np.ones((3, 4)), np.ones((7, 4)))),
    ]
    for f, args in fns:
        print(hashlib.sha256(pickle.dumps(rj.jit(f).lower(*args).module, protocol=5)).hexdigest())
""")


def test_traced_module_key_is_stable_across_processes():
    """The lowered-module cache is keyed by the pickled traced module: tracing the same
    function in another process (another string hash seed) must give the same bytes."""
    outs = []
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-c", KEY_SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    assert outs[0] == outs[1] == outs[2]


def test_key_pickler_refuses_foreign_code():
    """A function or class from outside relaxjax/NumPy/SymPy pickles by name only, so a
    traced module holding one is not cached (its code could change under the same key)."""
    import io
    import pickle
    from relaxjax import jit_cache as jit_module

    class Mine:
        pass
    for obj in (test_key_pickler_refuses_foreign_code, Mine, [np.float32, {"a": (1, "b")}]):
        buf = io.BytesIO()
        if isinstance(obj, list):
            jit_module._KeyPickler(buf, protocol=5).dump(obj)
            assert buf.getvalue() == pickle.dumps(obj, protocol=5)
        else:
            with pytest.raises(pickle.PicklingError):
                jit_module._KeyPickler(buf, protocol=5).dump(obj)
