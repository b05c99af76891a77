"""OpenBLAS's jobs on the OpenMP team (backends/llvm/blas_threads.py): products and LAPACK
calls, NumPy's and relaxjax's, give the same results with the callback installed as
NumPy's float64 products give; from many threads at once, in a forked child, and where
no OpenMP team can be had (OMP_DYNAMIC, a thread limit: the POSIX-thread path)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import numpy as np
import pytest

import relaxjax as rj
from relaxjax.backends.llvm import blas_threads, engine, target

pytestmark = pytest.mark.skipif(target.blas_threads_setter() is None,
                                reason="NumPy's OpenBLAS has no threads callback (before 0.3.28)")

# products large enough that OpenBLAS splits them into jobs (level 3 and level 2), LAPACK
CHECKS = textwrap.dedent("""
    import numpy as np
    def checks(seed):
        rng = np.random.default_rng(seed)
        for m, k, n in ((257, 301, 263), (64, 512, 2048), (1031, 67, 997), (1, 4099, 1021)):
            for dt, tol in ((np.float32, 1e-4), (np.float64, 1e-10)):
                a = rng.standard_normal((m, k)).astype(dt)
                b = rng.standard_normal((k, n)).astype(dt)
                want = a.astype(np.float64) @ b.astype(np.float64)
                bound = tol * np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64) + tol
                assert np.all(np.abs(a @ b - want) <= bound), (m, k, n, dt)
        s = rng.standard_normal((300, 300))
        s = s @ s.T + 300 * np.eye(300)
        x = np.linalg.solve(s, np.ones(300))
        assert np.allclose(s @ x, 1.0)
        c = np.linalg.cholesky(s)
        assert np.allclose(c @ c.T, s)
        return True
""")


def _run(code: str, env: dict, timeout: float = 300) -> str:
    full = dict(os.environ, **env)
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _prepared() -> None:
    engine.prepare_process()
    assert blas_threads.installed() == blas_threads.wanted()


def test_numpy_products_and_lapack_on_the_team():
    _prepared()
    ns: dict = {}
    exec(CHECKS, ns)
    before = blas_threads.counts()
    assert ns["checks"](0)
    if blas_threads.installed() and np.__config__.CONFIG["Build Dependencies"]["blas"]["name"] \
            == "scipy-openblas" and _openblas_threads() > 1:
        assert blas_threads.counts()["team"] > before["team"]


def _openblas_threads() -> int:
    import ctypes
    path, (prefix, suffix) = target.openblas()
    pre = prefix[:-len("cblas_")]
    return getattr(ctypes.CDLL(path), f"{pre}openblas_get_num_threads{suffix.rstrip('_')}_")()


def test_concurrent_callers():
    """Products and LU/Cholesky factorizations from four Python threads at once, in a
    subprocess (a hang fails by its timeout): OpenBLAS's LU queues its jobs to its own
    server threads while the other threads' products run through the callback."""
    code = CHECKS + textwrap.dedent("""
        import threading
        from relaxjax.backends.llvm import blas_threads, engine
        engine.prepare_process()
        errors = []
        def work(t):
            try:
                for r in range(4):
                    checks(10 * t + r)
                    a = np.random.default_rng(t).standard_normal((600, 600)) + 600 * np.eye(600)
                    assert np.allclose(a @ np.linalg.solve(a, np.ones(600)), 1.0)
            except Exception as e:
                errors.append(f"thread {t}: {type(e).__name__}: {e}")
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        print("errors", errors, "counts", blas_threads.counts())
    """)
    out = _run(code, {"OPENBLAS_NUM_THREADS": "2"}, timeout=120)
    assert "errors []" in out, out


def test_jitted_products_between_kernels():
    _prepared()

    @rj.jit
    def mlp(x, w1, b1, w2):
        return np.float32(0.5) * (x @ w1 + b1) @ w2

    import relaxjax.numpy as rnp    # noqa: F401  (the jit traces with relaxjax.numpy)
    rng = np.random.default_rng(1)
    for n in (1, 7, 64, 131):
        x = rng.standard_normal((n, 96)).astype(np.float32)
        w1 = rng.standard_normal((96, 1024)).astype(np.float32)
        b1 = rng.standard_normal(1024).astype(np.float32)
        w2 = rng.standard_normal((1024, 257)).astype(np.float32)
        want = 0.5 * (x.astype(np.float64) @ w1 + b1) @ w2
        got = mlp(x, w1, b1, w2)
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-3)


@pytest.mark.parametrize("env, path", [
    ({}, "team"),                                  # the OpenMP team
    ({"OMP_DYNAMIC": "true"}, "posix"),            # a team may come smaller: POSIX threads
    ({"OMP_THREAD_LIMIT": "1"}, "posix"),          # no team of 2: POSIX threads
    ({"RELAXJAX_BLAS_THREADS": "openblas"}, None),  # OpenBLAS's own threads
])
def test_in_a_fresh_process(env, path):
    code = CHECKS + textwrap.dedent("""
        from relaxjax.backends.llvm import blas_threads, engine
        engine.prepare_process()
        print("installed", blas_threads.installed())
        print("ok", checks(3))
        print("counts", blas_threads.counts())
    """)
    out = _run(code, {"OPENBLAS_NUM_THREADS": "2", **env})
    assert "ok True" in out
    assert ("installed True" in out) == (path is not None)
    if path is not None:
        counts = eval(out.split("counts ")[1])
        other = "posix" if path == "team" else "team"
        assert counts[path] > 0 and counts[other] == 0, counts


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_uses_openblas_threads():
    code = CHECKS + textwrap.dedent("""
        import os
        from relaxjax.backends.llvm import blas_threads, engine
        engine.prepare_process()
        assert blas_threads.installed()
        checks(4)
        pid = os.fork()
        if pid == 0:
            ok = (not blas_threads.installed()) and checks(5)
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        print("parent", checks(6), blas_threads.installed())
    """)
    out = _run(code, {"OPENBLAS_NUM_THREADS": "2"})
    assert "child 0" in out and "parent True True" in out


def test_not_installed_without_a_known_slot_count(monkeypatch):
    """An OpenBLAS whose thread slots are unknown (0) or too few for its threads gets no
    callback (its jobs' slot numbers could not be kept apart from its server threads')."""
    compiled = []

    def compile_module(text, names):          # never reached
        compiled.append(names)
        raise AssertionError("compiled")
    monkeypatch.setattr(blas_threads, "_INSTALLED", [])    # as in a process without it
    assert not blas_threads.install(1234, 0, 0, compile_module)
    assert not blas_threads.install(1234, 2, 0, compile_module)
    assert not blas_threads.install(1234, 40, 64, compile_module)
    assert not blas_threads.install(None, 2, 64, compile_module)
    assert compiled == []
