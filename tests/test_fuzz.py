"""Differential fuzzing (relaxjax.testing.fuzz): random numpy-API programs over random symbolic
signatures agree with NumPy on every backend, in both jit modes, and their gradients agree
across backends; the fuzzer itself finds and shrinks a wrong backend; and regressions for
bugs it found."""
from __future__ import annotations

import os
import runpy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.backends.registry import _BACKENDS
from relaxjax.backends.numpy_backend import NumpyExecutable
from relaxjax.shapes import symbol
from relaxjax.testing import fuzz

# RELAXJAX_FUZZ_PROGRAMS=5000 python -m pytest tests/test_fuzz.py for a longer run (or see
# python -m relaxjax.testing.fuzz --help for campaigns that write reproducer scripts)
PROGRAMS = int(os.environ.get("RELAXJAX_FUZZ_PROGRAMS", "150"))


def test_random_programs_agree_with_numpy_on_every_backend():
    count = [0]
    fuzz.fuzz(PROGRAMS, on_program=lambda p: count.__setitem__(0, count[0] + 1))
    assert count[0] == PROGRAMS


def test_gradients_of_random_programs_agree_across_backends():
    """Each backend's gradient of a random float program equals the reference interpreter's
    (the derivative is one program for all of them: this checks its lowering)."""
    count = [0]
    fuzz.fuzz_gradients(PROGRAMS // 2, on_program=lambda p: count.__setitem__(0, count[0] + 1))
    assert count[0] == PROGRAMS // 2


FEATURE_CASES = int(os.environ.get("RELAXJAX_FUZZ_FEATURE_CASES", "60"))


def test_feature_cases_agree_with_their_oracles_on_every_backend():
    """Static arguments that compare equal but differ (0.0/-0.0, 2/2.0, NaN), arrays the
    caller overwrites after capturing them, and kernels indexing with values read from data
    (in range or not): each case against NumPy or the kernel's own NumPy run."""
    from relaxjax.testing.fuzz.features import fuzz_features
    kinds: dict = {}
    fuzz_features(FEATURE_CASES, seed=0, on_case=lambda c: kinds.__setitem__(c.kind, kinds.get(c.kind, 0) + 1))
    assert sum(kinds.values()) == FEATURE_CASES
    assert set(kinds) == {"static", "captured", "kernel"}, kinds


# ----- the generator -------------------------------------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(fuzz.programs(max_ops=12))
def test_programs_print_as_python_that_runs_on_numpy(prog):
    src = str(prog)
    ns: dict = {"rj": rj}
    exec(compile(src, "<program>", "exec"), ns)             # the printed form is the program
    assert len(ns["SIGNATURE"]) == len(prog.inputs)
    rng = np.random.default_rng(0)
    dims = {symbol(n): max(lo, 3) if hi >= 3 else lo for n, lo, hi in prog.dims}
    args = []
    for shp, dt in prog.inputs:
        shape = tuple(int(d.subs(dims)) if not isinstance(d, int) else d for d in shp)
        args.append(rng.uniform(-4, 4, shape).astype(dt))
    with np.errstate(all="ignore"):
        out = ns["program"](np, *args)
    assert isinstance(out, tuple) and len(out) == len(prog.outputs)
    for o, k in zip(out, prog.outputs):
        op = prog.ops[k - len(prog.inputs)]
        want = tuple(int(d.subs(dims)) if not isinstance(d, int) else d for d in op.shape)
        assert np.shape(o) == want, (op, src)


def test_generator_covers_the_op_families():
    kinds: set = set()

    # derandomized: the same 200 programs every run, so the check cannot flake
    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None,
              derandomize=True)
    @given(fuzz.programs())
    def collect(prog):
        kinds.update(op.kind for op in prog.ops)
    collect()
    families = [("tanh", "sin", "cos"), ("exp", "log1p", "sqrt"), ("floor", "rint", "sign", "mod"),
                ("add", "subtract"), ("multiply", "divide"), ("greater", "less_equal", "equal", "not_equal"),
                ("where", "where_cmp"), ("sum", "mean", "var"), ("max", "min"), ("argmax", "argmin"),
                ("reshape",), ("squeeze", "expand_dims"), ("slice",), ("transpose",), ("matmul",),
                ("concatenate",), ("stack",), ("flip",), ("cast", "cast_int"), ("dim_value",)]
    for fam in families:
        assert kinds & set(fam), (fam, sorted(kinds))


# ----- the fuzzer finds a wrong backend and shrinks the program ----------------------------------

class _ReversingExecutable(NumpyExecutable):
    """A deliberately wrong backend: float results whose last axis has 3 or more elements come
    back reversed along it."""

    def __call__(self, dims, arrays):
        outs = super().__call__(dims, arrays)
        return [o[..., ::-1].copy() if isinstance(o, np.ndarray) and o.dtype.kind == "f" and o.ndim
                and o.shape[-1] >= 3 else o for o in outs]


def test_fuzzer_finds_and_shrinks_a_wrong_backend(tmp_path, monkeypatch):
    monkeypatch.setitem(_BACKENDS, "reversing", _ReversingExecutable)
    with pytest.raises(fuzz.Failure) as ei:     # found, then minimized (ops, outputs, dims)
        fuzz.fuzz(100, backends=["reversing"], modes=("explicit",), max_ops=12, seed=1, shrink=False,
                  minimize_s=30)
    f = ei.value
    assert "reversing backend, explicit mode differs" in str(f)
    assert len(f.program.ops) <= 2, str(f.program)               # shrunk
    assert any(a.ndim and a.shape[-1] == 3 for a in f.inputs), [a.shape for a in f.inputs]
    # the reproducer script fails the same way while the bug is there
    path = tmp_path / "repro.py"
    path.write_text(fuzz.reproducer(f))
    with pytest.raises(AssertionError, match="values differ"):
        runpy.run_path(str(path), run_name="__main__")
    # and passes on a correct backend
    path.write_text(fuzz.reproducer(f).replace("backend='reversing'", "backend='numpy'"))
    runpy.run_path(str(path), run_name="__main__")


def test_gradient_fuzzer_finds_a_wrong_backend(monkeypatch):
    monkeypatch.setitem(_BACKENDS, "reversing", _ReversingExecutable)
    with pytest.raises(fuzz.Failure, match="gradient on the reversing backend differs"):
        fuzz.fuzz_gradients(50, backends=["reversing"], seed=1)


# ----- regressions for bugs the fuzzer found ------------------------------------------------------

def test_dims_with_a_floor_after_a_factor_evaluate_right():
    """Regression (shapes.dim_str): ``c1 * floor((c0 + 1) / 2)`` printed as
    ``c1 * (c0 + 1) // 2``, which Python reads as ``(c1 * (c0 + 1)) // 2``; every evaluator
    compiled from the text (binders, the numpy backend's dims, the LLVM host code) got it wrong."""
    from relaxjax.shapes import compile_dims, dim_str, floordiv, mod
    c0, c1 = symbol("c0"), symbol("c1")
    for e in [c1 * floordiv(c0 + 1, 2), 2 * floordiv(c0, 3) * c1, c1 * mod(c0, 3),
              floordiv(c0, 2) * floordiv(c1, 3)]:
        f = compile_dims([e], ["c0", "c1"])
        for a in range(1, 7):
            for b in range(1, 7):
                assert f(a, b)[0] == int(e.xreplace({c0: a, c1: b})), (dim_str(e), a, b)


@pytest.mark.parametrize("backend", rj.backends.available_backends())
def test_fuzz_regression_var_over_a_strided_slice(backend):
    """The fuzzer's reproducer: the element count of ``x[::2].T`` (c1 * ((c0 + 1) // 2))
    divided the sum in ``var`` with the wrong value on the numpy backend."""
    def program(xp, x0, x1):
        v1 = x1.astype(xp.float32)[::2]
        v3 = xp.minimum(x0, xp.transpose(v1, (1, 0)))
        return xp.var(v3, axis=(0, 1)), xp.reshape(v3, (-1,)), v3.sum(0) / v3.shape[1]
    x1 = np.array([[1.0, -3.0, -3.0, 0.0], [-2.0, -1.0, 0.0, -3.0], [5.0, 2.0, 1.0, 0.5]])
    x0 = np.array(-1.0)
    f = rj.jit(lambda a, b: program(rnp, a, b), backend=backend)
    for rows in (2, 3):
        want = program(np, x0, x1[:rows])
        for g, w in zip(f(x0, x1[:rows]), want):
            np.testing.assert_allclose(g, w, rtol=1e-6)


@pytest.mark.parametrize("backend", rj.backends.available_backends())
def test_fuzz_regression_derived_dim_of_one_broadcasts_in_automatic_mode(backend):
    """The fuzzer's reproducer: in automatic mode ``x0[..., 1:]`` of an (n, 2) array has the
    symbolic last axis ``x0_1 - 1``, which is 1 here; NumPy broadcasts it, the trace raised
    ShapeError.  Now it broadcasts under a guard (a call where it is not 1 traces again)."""
    def program(xp, x0, x1):
        v0 = x0[..., 1:]
        return xp.where(x1 > v0, x1, v0), x1 * v0
    f = rj.jit(lambda a, b: program(rnp, a, b), backend=backend)
    rng = np.random.default_rng(0)
    for n, k, m in [(2, 2, 2), (5, 2, 3), (3, 3, 2), (4, 2, 7)]:
        x0, x1 = rng.standard_normal((n, k)), rng.standard_normal((n, m))
        for g, w in zip(f(x0, x1), program(np, x0, x1)):
            np.testing.assert_array_equal(g, w)
    with pytest.raises(ValueError):              # NumPy cannot broadcast these either
        f(rng.standard_normal((3, 3)), rng.standard_normal((3, 4)))


@pytest.mark.parametrize("backend", rj.backends.available_backends())
def test_fuzz_regression_floor_dim_of_one_broadcasts_and_verifies(backend, monkeypatch):
    """The fuzzer's reproducer: ``x[::2]`` of a 2-row array has ``(x0 + 1) // 2`` rows, 1
    here; broadcasting it needs the trace to specialize x0 (a guard), else the verifier,
    not knowing the guard, rejects ``(x0 + 1) // 2`` against ``y0``."""
    monkeypatch.setenv("RELAXJAX_VERIFY", "1")
    f = rj.jit(lambda x, y: x[::2] + y, backend=backend)
    rng = np.random.default_rng(0)
    for n, m in [(2, 2), (2, 5), (1, 3), (2, 3)]:
        x, y = rng.standard_normal((n, 3)), rng.standard_normal((m, 3))
        np.testing.assert_array_equal(f(x, y), x[::2] + y)
    with pytest.raises(ValueError):
        f(rng.standard_normal((4, 3)), rng.standard_normal((3, 3)))


def test_float64_to_float16_does_not_crash_the_llvm_backend():
    """Seen once as a segfault (in a subprocess, so a crash fails only this test)."""
    import subprocess
    import sys
    code = ("import numpy as np, relaxjax as rj, relaxjax.numpy as rnp\n"
            "x = np.linspace(-100, 100, 23)\n"
            "y = rj.jit(lambda a: rnp.astype(a, 'float16'), backend='llvm')(x)\n"
            "assert np.array_equal(y, x.astype('float16'))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))})
    assert r.returncode == 0, r.stderr[-2000:]
