"""Running a program on every backend and mode against NumPy (:func:`check_program`), and
the :class:`Failure` it raises."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hseed

from .._core import assert_tree_close
from ...backends import available_backends
from .program import Program


def low_precision(prog: Program) -> bool:
    """Whether any value of the program is float32 or narrower (a float64 result may then
    carry float32 rounding, e.g. after a cast)."""
    dts = [np.dtype(dt) for _, dt in prog.inputs] + [np.dtype(op.dtype) for op in prog.ops]
    return any(d.kind == "f" and d.itemsize <= 4 for d in dts)


def tolerance_for(prog: Program, dtype) -> dict:
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        return dict(rtol=0, atol=0)
    if dtype.itemsize <= 4 or low_precision(prog):
        return dict(rtol=2e-3, atol=2e-4)
    return dict(rtol=1e-7, atol=1e-8)


def difference_kind(e: AssertionError) -> str:
    """What a difference from NumPy is in: ``"dtype"``, ``"shape"`` or ``"values"`` (read from
    the message of :func:`assert_tree_close`)."""
    return "dtype" if "dtype" in str(e) else "shape" if "shape" in str(e) else "values"


class Failure(AssertionError):
    def __init__(self, message, program, inputs, dims, backend, mode):
        super().__init__(message)
        self.program, self.inputs, self.dims = program, inputs, dims
        self.backend, self.mode = backend, mode


def _compare(got, want, prog):
    got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
    want = tuple(want)
    if len(got) != len(want):
        raise AssertionError(f"{len(got)} results, expected {len(want)}")
    for k, (g, w) in enumerate(zip(got, want)):
        tol = tolerance_for(prog, np.asarray(w).dtype)
        try:
            assert_tree_close(np.asarray(g) if isinstance(g, np.generic) else g, np.asarray(w), **tol)
        except AssertionError as e:
            raise AssertionError(f"output {k}: {e}") from None


def _failure(e: Exception, what: str, than: str, prog, arrays, dims, backend, mode) -> Failure:
    """The :class:`Failure` for ``e`` (a difference, or an error) on ``what``."""
    kind = "differs" if isinstance(e, AssertionError) else f"raised {type(e).__name__}"
    msg = (f"{what} {kind}{than}: {e}\n"
           f"dims: {dims}; input shapes: {[a.shape for a in arrays]}\n{prog}")
    return Failure(msg, prog, arrays, dims, backend, mode)


def targets(backends=None, modes=("explicit", "auto")) -> list:
    bs = available_backends() if backends is None else list(backends)
    return [(b, m) for b in bs for m in modes]


def check_program(prog: Program, input_sets: list, backends=None, modes=("explicit", "auto")) -> None:
    """Run ``prog`` on NumPy and jitted on each (backend, mode) for every input set (one jit
    per target, reused across the sets); raise :class:`Failure` at the first difference."""
    import relaxjax as rj
    import relaxjax.numpy as rnp
    fn = prog.compile()
    sig = prog.signature()
    jits = {}
    for arrays, dims in input_sets:
        with np.errstate(all="ignore"):
            want = fn(np, *[np.array(a) for a in arrays])
        for backend, mode in targets(backends, modes):
            key = (backend, mode)
            try:
                if key not in jits:
                    jits[key] = rj.jit(lambda *xs: fn(rnp, *xs), backend=backend,
                                       shapes=sig if mode == "explicit" else None)
                with np.errstate(all="ignore"):
                    got = jits[key](*arrays)
                _compare(got, want, prog)
            except Exception as e:
                raise _failure(e, f"{backend} backend, {mode} mode", "", prog, arrays, dims,
                               backend, mode) from e


def check_gradient(prog: Program, input_sets: list, backends=None) -> None:
    """The gradient of ``sum(cos(out))`` over the program's float results with respect to its
    float inputs, jitted on each backend, against the numpy backend's (the reference
    interpreter, running the same derivative program): what it finds are lowering bugs in
    the programs derivatives make.  A program whose derivative the reference cannot take
    (an op without a rule) is skipped; raise :class:`Failure` at the first difference."""
    import relaxjax as rj
    import relaxjax.numpy as rnp
    fn = prog.compile()
    wrt = tuple(k for k, (_, dt) in enumerate(prog.inputs) if np.dtype(dt).kind == "f")
    if not wrt:
        return

    def loss(*xs):
        outs = fn(rnp, *xs)
        terms = [rnp.sum(rnp.cos(o)) for o in outs if np.dtype(o.dtype).kind == "f"]
        return sum(terms[1:], terms[0]) if terms else rnp.sum(rnp.cos(xs[wrt[0]])) * 0.0
    others = [b for b in (available_backends() if backends is None else backends) if b != "numpy"]
    grads = {b: rj.jit(rj.grad(loss, argnums=wrt), backend=b) for b in ["numpy"] + others}
    for arrays, dims in input_sets:
        try:
            with np.errstate(all="ignore"):
                want = grads["numpy"](*arrays)
        except (NotImplementedError, TypeError):
            return
        for backend in others:
            try:
                with np.errstate(all="ignore"):
                    got = grads[backend](*arrays)
                _compare(got, want, prog)
            except Exception as e:
                raise _failure(e, f"the gradient on the {backend} backend", " from the numpy backend's",
                               prog, arrays, dims, backend, "auto") from e


def search(strategy, check, n: int, *, seed=None, database=None, shrink: bool = False,
           on_draw=None) -> None:
    """One hypothesis search: ``check(drawn)`` on ``n`` draws of ``strategy``; raises the
    :class:`Failure` of the first failing draw (shrunk by hypothesis with ``shrink``)."""
    last: list = []

    @settings(max_examples=n, deadline=None, database=database, print_blob=False,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
              verbosity=Verbosity.quiet,
              phases=list(Phase) if shrink else [p for p in Phase if p != Phase.shrink])
    @given(strategy)
    def run(drawn):
        if on_draw is not None:
            on_draw(drawn)
        try:
            check(drawn)
        except Failure as f:
            last[:] = [f]
            raise
    if seed is not None:
        run = hseed(seed)(run)
    try:
        run()
    except Failure as e:
        f = last[0] if last else e
        raise f from f.__cause__
