"""Fuzzing the features around a program rather than its ops: static arguments, arrays
captured from the enclosing scope, and user kernels that index with values read from data.

Each draw is a :class:`FeatureCase` that runs itself against its oracle (:meth:`check`):

- ``static``: a drawn program whose outputs are combined with a static argument ``s``; one
  jitted function is called with a sequence of statics that compare equal but are not the
  same (``0.0``/``-0.0``, ``2``/``2.0``/``np.float64(2)``, NaN, ``True``) and must give
  NumPy's result, dtype included, for each: a cache keyed by ``==`` returns another's code.
- ``captured``: a drawn program whose outputs are combined with an array of the enclosing
  scope; after the first call the caller overwrites that array, and the next call with the
  same shapes must still give the result for the captured values (JAX's rule: captured
  arrays are constants of the trace).
- ``kernel``: an ``rj.kernel`` that gathers, scatters or accumulates through an index array
  whose values may fall outside the indexed axis; the kernel's own Python run on NumPy
  (eager ``call_tir``) is the oracle, and every backend must agree with it: the same
  values, or an IndexError where it raises one.
"""
from __future__ import annotations

import linecache
import math
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from .._core import arrays_for, assert_tree_close
from .check import Failure, _compare, search, targets
from .generate import programs

# statics that are == to another of the list but are not the same value or type
STATICS = (0.0, -0.0, 2, 2.0, np.float64(2.0), np.float32(2.0), np.int32(2), True, 1, -3, 0.5,
           float("nan"), np.float64("nan"))
COMBINE = ("{o} * {s}", "{o} + {s}", "{o} / {s}", "xp.maximum({o}, {s})", "{o} - {s} * {o}")


@dataclass
class FeatureCase:
    kind: str                       # "static" | "captured" | "kernel"
    source: str                     # what runs, printed (a reproducer)
    data: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return f"# feature case: {self.kind}\n{self.source}"

    def check(self, backends=None) -> None:
        getattr(self, "_check_" + self.kind)(backends)

    # -- static arguments --------------------------------------------------------------
    def _check_static(self, backends) -> None:
        import relaxjax as rj
        import relaxjax.numpy as rnp
        prog, arrays, statics, combine = (self.data[k] for k in ("program", "arrays", "statics", "combine"))
        fn = prog.compile()

        def with_static(xp, xs, s):
            return tuple(eval(combine.format(o="o", s="s"), {"xp": xp, "o": o, "s": s})  # noqa: S307
                         for o in fn(xp, *xs))
        for backend, mode in targets(backends, ("auto",)):
            f = rj.jit(lambda *xs, s: with_static(rnp, xs, s), backend=backend, static_argnames="s")
            for s in statics:
                self._run(lambda: f(*arrays, s=s), lambda: with_static(np, [np.array(a) for a in arrays], s),
                          prog, backend, mode, f"static s={s!r} ({type(s).__name__})")

    # -- captured arrays ---------------------------------------------------------------
    def _check_captured(self, backends) -> None:
        import relaxjax as rj
        import relaxjax.numpy as rnp
        prog, arrays, captured = self.data["program"], self.data["arrays"], self.data["captured"]
        fn = prog.compile()
        for backend, mode in targets(backends, ("auto",)):
            c = captured.copy()

            def f(*xs):
                return tuple(r for o in fn(rnp, *xs) for r in (o + c, o * c))
            want = tuple(r for o in fn(np, *[np.array(a) for a in arrays]) for r in (o + captured, o * captured))
            jf = rj.jit(f, backend=backend)
            self._run(lambda: jf(*arrays), lambda: want, prog, backend, mode, "first call")
            c[...] = c * 3.0 + 1.0          # the caller writes the captured array
            self._run(lambda: jf(*arrays), lambda: want, prog, backend, mode,
                      "after the caller wrote the captured array")

    # -- user kernels with data-dependent indices --------------------------------------
    def _check_kernel(self, backends) -> None:
        import relaxjax as rj
        kern = _kernel(self.data["name"], self.data["kernel_source"])
        args, out = self.data["args"], self.data["out"]
        out_struct = rj.ShapeDtypeStruct(out[0], out[1])

        def eager():
            return rj.call_tir(kern, *[np.array(a) for a in args], out=out_struct)
        try:
            want = eager()
            err = None
        except IndexError as e:
            want, err = None, e
        for backend, mode in targets(backends, ("auto",)):
            f = rj.jit(lambda *xs: rj.call_tir(kern, *xs, out=out_struct), backend=backend)
            if err is None:
                self._run(lambda: f(*args), lambda: (want,), None, backend, mode, "kernel")
                continue
            try:
                f(*args)
            except IndexError:
                continue
            except Exception as e:
                raise Failure(f"{backend}: expected IndexError like the kernel's NumPy run "
                              f"({err}), got {type(e).__name__}: {e}\n{self}", self, args, {}, backend, mode) from e
            raise Failure(f"{backend}: no IndexError where the kernel's NumPy run raised {err}\n{self}",
                          self, args, {}, backend, mode)

    def _run(self, got, want, prog, backend, mode, what) -> None:
        try:
            with np.errstate(all="ignore"):
                w = want()
        except (TypeError, ValueError) as e:        # NumPy refuses: so must relaxjax
            try:
                got()
            except type(e):
                return
            except Exception as other:
                raise Failure(f"{backend} backend, {mode} mode ({what}): NumPy raised "
                              f"{type(e).__name__}: {e}; relaxjax raised {type(other).__name__}: "
                              f"{other}\n{self}", self, self.data.get("arrays"), {}, backend, mode) from other
            raise Failure(f"{backend} backend, {mode} mode ({what}): NumPy raised {type(e).__name__}: "
                          f"{e}; relaxjax did not\n{self}", self, self.data.get("arrays"), {}, backend, mode)
        try:
            with np.errstate(all="ignore"):
                g = got()
            if prog is None:            # a kernel: the dtype's default tolerance
                assert_tree_close(g, w[0])
            else:
                _compare(g, w, prog)
        except Exception as e:
            kind = "differs" if isinstance(e, AssertionError) else f"raised {type(e).__name__}"
            raise Failure(f"{backend} backend, {mode} mode {kind} ({what}): {e}\n{self}",
                          self, self.data.get("arrays"), {}, backend, mode) from e


# ---- drawing ---------------------------------------------------------------------------

def _float_program(draw, max_ops):
    """A drawn program and one input set (programs with float outputs combine with floats
    and ints alike)."""
    prog = draw(programs(min_ops=1, max_ops=max_ops))
    arrays, _ = draw(arrays_for(prog.signature(), min_side=1, max_side=prog.max_side, with_dims=True))
    return prog, arrays


@st.composite
def static_cases(draw, max_ops: int = 8) -> FeatureCase:
    prog, arrays = _float_program(draw, max_ops)
    statics = draw(st.lists(st.sampled_from(STATICS), min_size=2, max_size=5))
    combine = draw(st.sampled_from(COMBINE))
    src = f"{prog}\n\n# each output o becomes {combine.format(o='o', s='s')}, s static, in turn: {statics!r}"
    return FeatureCase("static", src, dict(program=prog, arrays=arrays, statics=statics, combine=combine))


@st.composite
def captured_cases(draw, max_ops: int = 8) -> FeatureCase:
    prog, arrays = _float_program(draw, max_ops)
    # a scalar or a 1-element array broadcasts against every output
    shape = draw(st.sampled_from([(), (1,)]))
    captured = np.asarray(draw(st.floats(-4, 4, allow_nan=False)), draw(st.sampled_from(["float32", "float64"])))
    captured = captured.reshape(shape)
    src = f"{prog}\n\n# outputs o become (o + c, o * c); c = {captured!r} captured, then overwritten"
    return FeatureCase("captured", src, dict(program=prog, arrays=arrays, captured=captured))


KERNELS = {   # name: (source over n = len(idx), m = len(x), output (shape, dtype) from n, m)
    "gather": ("""
def gather(idx: rj.Buffer[("n",), "{it}"], x: rj.Buffer[("m",), "{dt}"], out: rj.Buffer[("n",), "{dt}"]):
    for i in range(idx.shape[0]):
        out[i] = x[idx[i]] * 2.0
""", lambda n, m: (n,), ("idx", "x")),
    "gather_shifted": ("""
def gather_shifted(idx: rj.Buffer[("n",), "{it}"], x: rj.Buffer[("m",), "{dt}"], out: rj.Buffer[("n",), "{dt}"]):
    for i in range(idx.shape[0]):
        out[i] = x[idx[i] + 1] - x[idx[i]]
""", lambda n, m: (n,), ("idx", "x")),
    "gather_rows": ("""
def gather_rows(idx: rj.Buffer[("n",), "{it}"], x: rj.Buffer[("m", 3), "{dt}"], out: rj.Buffer[("n", 3), "{dt}"]):
    for i in range(idx.shape[0]):
        for j in range(3):
            out[i, j] = x[idx[i], j]
""", lambda n, m: (n, 3), ("idx", "x2")),
    "scatter": ("""
def scatter(idx: rj.Buffer[("n",), "{it}"], v: rj.Buffer[("n",), "{dt}"], x: rj.Buffer[("m",), "{dt}"], out: rj.Buffer[("m",), "{dt}"]):
    for j in range(x.shape[0]):
        out[j] = x[j]
    for i in range(idx.shape[0]):
        out[idx[i]] = v[i]
""", lambda n, m: (m,), ("idx", "v", "x")),
    "accumulate": ("""
def accumulate(idx: rj.Buffer[("n",), "{it}"], v: rj.Buffer[("n",), "{dt}"], x: rj.Buffer[("m",), "{dt}"], out: rj.Buffer[("m",), "{dt}"]):
    for j in range(x.shape[0]):
        out[j] = x[j]
    for i in range(idx.shape[0]):
        out[idx[i]] += v[i]
""", lambda n, m: (m,), ("idx", "v", "x")),
}


@st.composite
def kernel_cases(draw) -> FeatureCase:
    name = draw(st.sampled_from(sorted(KERNELS)))
    template, out_shape, inputs = KERNELS[name]
    it = draw(st.sampled_from(["int32", "int64"]))
    dt = draw(st.sampled_from(["float32", "float64"]))
    n = draw(st.integers(1, 40))
    m = draw(st.integers(1, 40))
    # mostly in range (the values matter), sometimes one index just outside either end
    if draw(st.integers(0, 3)) == 0:
        lo, hi = -m - 2, m + 2
    else:
        lo, hi = 0, m - 2 if name == "gather_shifted" and m >= 2 else m - 1
    idx = np.array(draw(st.lists(st.integers(lo, max(lo, hi)), min_size=n, max_size=n)), it)
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    values = {"idx": idx, "x": rng.uniform(-4, 4, m).astype(dt), "x2": rng.uniform(-4, 4, (m, 3)).astype(dt),
              "v": rng.uniform(-4, 4, n).astype(dt)}
    src = template.format(it=it, dt=dt).strip() + "\n"
    args = [values[k] for k in inputs]
    return FeatureCase("kernel", src + f"# inputs: {args!r}\n", dict(name=name, args=args, out=(out_shape(n, m), dt),
                                                                     kernel_source=src))


def feature_cases(max_ops: int = 8) -> st.SearchStrategy:
    return st.one_of(static_cases(max_ops), captured_cases(max_ops), kernel_cases())


def _kernel(name: str, source: str):
    """The ``rj.kernel`` of generated source (registered with linecache, where the kernel
    parser reads a function's source from)."""
    import relaxjax as rj
    filename = f"<relaxjax fuzz kernel {abs(hash(source)):x}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns: dict = {"rj": rj, "math": math}
    exec(compile(source, filename, "exec"), ns)    # noqa: S102 (generated)
    return rj.kernel(ns[name])


def fuzz_features(n_cases: int, *, seed: int | None = None, backends=None, max_ops: int = 8,
                  on_case=None, database=None) -> None:
    """One hypothesis search over ``n_cases`` feature cases; raises the :class:`Failure` of
    the first failing one (not shrunk: each attempt compiles)."""
    search(feature_cases(max_ops), lambda case: case.check(backends), n_cases, seed=seed,
           database=database, on_draw=on_case)
