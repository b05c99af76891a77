"""Every kernel of the NPBench suite (benchmarks/npbench_kernels) at small sizes, jitted on
the llvm and numpy backends, against a NumPy float64 reference written here for the
kernel (its ``ref``) or, for the kernels without one, the same function run eagerly on
NumPy arrays.  No NPBench checkout is needed.

Kernels that need structured control flow (``relaxjax.lax.fori_loop``/``scan``/
``while_loop``) or in-place updates of traced arrays (``x[i] = v``, ``x.at[i].add(v)``) are
skipped, with the reason, while this relaxjax lacks them, and run as soon as it has them.
"""
from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import pytest

import relaxjax as rj
from relaxjax.core import Tracer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import npbench_kernels as K  # noqa: E402

NEEDS_CONTROL_FLOW = K.NEEDS_CONTROL_FLOW
HAVE = {"control_flow": hasattr(rj.lax, "fori_loop"),
        "inplace": hasattr(Tracer, "__setitem__") and hasattr(Tracer, "at")}
WHY = {"control_flow": "relaxjax.lax has no fori_loop/scan/while_loop yet",
       "inplace": "traced arrays take no in-place updates (x[i] = v, x.at[i].add) yet"}


# compile takes 5-20 s (sympy in shape proofs of slices with floor-divided dims, and in
# FuseTIR's index comparison of 7-d einsums): tested on the llvm backend only, to keep
# this file under a minute
SLOW_COMPILE = {"lenet", "scattering_self_energies"}


def _missing(k):
    return [WHY[n] for n in sorted(k.needs) if not HAVE[n]]


def _close(got, exp, rtol):
    assert len(got) == len(exp), (len(got), len(exp))
    for g, e in zip(got, exp):
        g, e = np.asarray(g), np.asarray(e)
        assert g.shape == e.shape, (g.shape, e.shape)
        tol = max(rtol, 1e-4) if g.dtype == np.float32 else rtol
        np.testing.assert_allclose(g, e, rtol=tol, atol=1e-9 if tol else 0)


def test_every_npbench_kernel_is_written():
    assert len(K.KERNELS) == 54
    for k in K.KERNELS.values():
        assert k.source and k.inputs is not None and k.fn.__doc__, k.name
        assert k.source.split("/")[0] in k.fn.__doc__, k.name   # names its NPBench source


@pytest.mark.parametrize("name", sorted(K.KERNELS))
def test_eager_against_reference(name):
    """The kernel run eagerly on NumPy arrays (control flow as Python loops) against its
    reference: checks the algorithm whatever relaxjax can trace."""
    k = K.KERNELS[name]
    if k.ref is None:
        pytest.skip("no separate reference: the eager run is the reference")
    for s in k.sizes:
        vals = k.inputs(np.random.default_rng(s), s)
        _close(k.outputs(k.fn(*k.arguments(vals))), k.reference(vals), k.rtol)


@pytest.mark.parametrize("backend", ["llvm", "numpy"])
@pytest.mark.parametrize("name", sorted(K.KERNELS))
def test_jitted_against_reference(name, backend):
    k = K.KERNELS[name]
    if _missing(k):
        pytest.skip("; ".join(_missing(k)))
    if backend != "llvm" and name in SLOW_COMPILE:
        pytest.skip("compiles slowly (see SLOW_COMPILE); tested on llvm")
    f = rj.jit(k.fn, static_argnums=k.static_argnums(), backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for s in k.sizes:
            vals = k.inputs(np.random.default_rng(s), s)
            _close(k.outputs(f(*k.arguments(vals))), k.reference(vals), k.rtol)
