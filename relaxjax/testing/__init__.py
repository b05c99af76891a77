"""Property-based testing helpers for functions compiled with relaxjax (needs ``hypothesis``).

* :func:`arrays_for` — a hypothesis strategy drawing NumPy inputs that satisfy a symbolic
  signature (one consistent value per dim, bounds and axis expressions such as ``n * 4`` or
  ``n // 2`` respected);
* :func:`check_against` — run the jitted function and a reference (by default the same Python
  function run eagerly on NumPy) on drawn inputs and compare them, shrinking failures to the
  smallest shapes;
* :func:`assert_shape_polymorphic` — check that one compile serves every drawn shape;
* :mod:`relaxjax.testing.fuzz` — differential fuzzing of random numpy-API programs across
  backends (``python -m relaxjax.testing.fuzz --programs 10000``).
"""
try:
    import hypothesis  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without hypothesis
    raise ImportError("relaxjax.testing needs the 'hypothesis' package: pip install hypothesis "
                      "(or pip install 'relaxjax[test]')") from e

from ._core import (arrays_for, assert_shape_polymorphic, assert_tree_close, check_against,
                    default_tolerance)

__all__ = ["arrays_for", "check_against", "assert_shape_polymorphic", "assert_tree_close",
           "default_tolerance"]
