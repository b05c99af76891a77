"""Differential fuzzing: random numpy-API programs over random symbolic signatures, run on
every backend (jitted, with the symbolic signature and in automatic mode) and on NumPy.

A program is data: dims with bounds, input structs, and a list of :class:`Op` records
(each a source template over earlier values), so it prints as Python source, which is
also how it runs (``program(xp, *inputs)`` with ``xp`` = ``numpy`` or
``relaxjax.numpy``).  Programs are drawn by hypothesis (:func:`programs`), so a failure
shrinks to a small program and small shapes; :func:`reproducer` writes it as a
stand-alone script.

Ops: elementwise unary/binary ufuncs (total on their inputs: ``exp`` of clipped values,
``sqrt(abs(x))``, division by ``1 + |y|``...), comparisons and ``where``, broadcasting
(size-1 axes, lower ranks, Python scalars, dims as values), reductions (sum, mean, max,
min, var, argmax, any; axis, tuples, keepdims), reshapes provable from the symbolic shape
(flatten, merge, split ``n * 2`` into ``(n, 2)``, unit axes), slices (steps, negative
steps, symbolic stops), transposes, matmul, concatenate/stack, flip, casts.  Magnitudes are
tracked, and a value that could grow past 1e4 is squashed by ``tanh``.

Gradients: :func:`fuzz_gradients` differentiates float programs and compares each backend's
gradient with the numpy backend's (lowering bugs in the programs derivatives make).

Long campaigns: ``python -m relaxjax.testing.fuzz --programs 10000 [--seed S] [--out DIR]``.
"""
from .program import DIM_NAMES, LIMIT, Op, Program  # noqa: F401
from .generate import programs  # noqa: F401
from .check import Failure, check_gradient, check_program, low_precision, targets, tolerance_for  # noqa: F401
from .minimize import minimize, reproducer  # noqa: F401
from .campaign import campaign, fuzz, fuzz_gradients  # noqa: F401


__all__ = ["DIM_NAMES", "LIMIT", "Op", "Program", "programs", "Failure", "check_program",
           "low_precision", "targets", "tolerance_for", "minimize", "reproducer", "campaign",
           "fuzz", "check_gradient", "fuzz_gradients"]
