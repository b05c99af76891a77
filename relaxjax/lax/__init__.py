"""Primitives: strict-dtype graph operations, each with its shape rule, dtype rule and
NumPy reference implementation.  ``relaxjax.numpy`` is the NumPy-compatible layer on top."""
from .elementwise import *  # noqa: F401,F403
from .elementwise import abs, max, min, pow, round  # noqa: F401  (names shadowing builtins)
from .reduction import (reduce_sum, reduce_prod, reduce_max, reduce_min, reduce_and, reduce_or,  # noqa: F401
                        argmax, argmin, cumsum, cumprod, cummax, cummin)
from .structural import reshape, transpose, broadcast_to, concatenate, slice, pad, iota  # noqa: F401
from .indexing import (take, take_along_axis, nonzero, iota_count, boolean_mask, match_cast,  # noqa: F401
                       dynamic_slice, dynamic_slice_p, dynamic_update_slice,
                       dynamic_update_slice_p, update_slice, scatter)
from .linalg import matmul  # noqa: F401
from .complex_parts import real, imag, complex  # noqa: F401
from .sorting import sort, argsort  # noqa: F401
from .control_flow import fori_loop, while_loop, scan, map, cond, switch  # noqa: F401
from . import control_flow_batching  # noqa: F401  (the loops' and cond's batching rules)
from ..core import PRIMITIVES, Primitive, bind  # noqa: F401
