"""relaxjax versions of every kernel of NPBench (Ziogas et al., ICS 2021;
https://github.com/spcl/npbench), written from each kernel's algorithm the way a NumPy or
JAX user writes it, with ``np.`` functions (they dispatch to ``relaxjax.numpy`` on traced
arrays) and JAX's structured control flow (``relaxjax.lax.fori_loop``/``scan``/...) for
time steps and recurrences.  Each function names its NPBench source in its docstring.

``KERNELS`` maps NPBench's benchmark name (the stem of its ``bench_info/<name>.json``) to a
:class:`Kernel`: the function, which of NPBench's inputs it takes (``args``), which of them
are static (Python ints that fix shapes), which of NPBench's outputs its results are
compared with, whether it needs control flow or in-place updates that this tree may lack,
and a generator of small NPBench-independent inputs for the tests.  Complex kernels take
and return complex arrays, as NPBench's NumPy versions do.  No NPBench code or data is kept here: ``benchmarks/npbench_suite.py``
loads NPBench's initializers and peer versions from a checkout.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np


@dataclasses.dataclass(frozen=True)
class Kernel:
    name: str                      # NPBench's benchmark name (bench_info/<name>.json)
    source: str                    # NPBench's folder under npbench/benchmarks/
    fn: Callable
    args: tuple[str, ...]          # NPBench input names the function takes, in order
    static: tuple[str, ...] = ()   # of args: passed as static arguments (fix shapes)
    npb_out: tuple[int, ...] | None = None   # indices into NPBench's outputs (its return
    #                                          values, then its output_args); None: all
    written: tuple[str, ...] = ()     # inputs NPBench's NumPy version writes its result
    #                                    into though bench_info lists no output_args
    needs: frozenset = frozenset()     # {"control_flow", "inplace"}: features not yet merged
    inputs: Callable[[np.random.Generator, int], dict] | None = None  # small test inputs
    sizes: tuple[int, ...] = (1, 7)    # sizes the tests call inputs() with
    ref: Callable | None = None        # NumPy float64 reference; None: fn run eagerly
    rtol: float = 1e-6                 # for float64 results (float32: 1e-4 at least)

    def __call__(self, *args: Any):
        return self.fn(*args)

    def arguments(self, values: dict) -> list:
        """The function's arguments from NPBench-named values."""
        return [values[name] for name in self.args]

    @staticmethod
    def outputs(results) -> list:
        """The function's results as a list."""
        return list(results) if isinstance(results, (tuple, list)) else [results]

    def static_argnums(self) -> tuple[int, ...]:
        """Positions of the static arguments in the argument list."""
        return tuple(i for i, name in enumerate(self.args) if name in self.static)

    def reference(self, values: dict) -> list:
        """The NumPy float64 reference: ``ref`` on the values, else the function run
        eagerly on NumPy arrays."""
        if self.ref is not None:
            r = self.ref(*[values[a] for a in self.args])
            return list(r) if isinstance(r, (tuple, list)) else [r]
        return self.outputs(self.fn(*self.arguments(values)))


KERNELS: dict[str, Kernel] = {}


def register(name: str, source: str, args: str, **kw) -> Callable:
    def deco(fn: Callable) -> Callable:
        for key in ("static", "written"):
            if isinstance(kw.get(key), str):
                kw[key] = tuple(kw[key].split())
        if "needs" in kw:
            kw["needs"] = frozenset(kw["needs"].split())
        KERNELS[name] = Kernel(name, source, fn, tuple(args.split()), **kw)
        return fn
    return deco


from . import polybench, deep_learning, other  # noqa: E402,F401  (they register)

#: kernels that need relaxjax.lax control flow or in-place updates (x[i] = v, x.at[...])
NEEDS_CONTROL_FLOW = frozenset(k for k, v in KERNELS.items() if v.needs)
