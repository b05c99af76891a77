"""The NumPy functions composed from the rest of relaxjax.numpy, exported together:
grids, elementwise helpers, combining, polynomials (``_functions``) and statistics,
counting, binning, convolution, interpolation (``_stats``)."""
from ._functions import *  # noqa: F401,F403
from ._functions import __all__ as _functions_all
from ._stats import *  # noqa: F401,F403
from ._stats import __all__ as _stats_all

__all__ = [*_functions_all, *_stats_all]
