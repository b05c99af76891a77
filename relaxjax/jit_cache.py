"""The persistent cache of lowered modules: ``lower_cached(module, pipeline)`` runs the
pipeline once per traced module across processes (the compiled code itself is cached by the
backends, keyed by the code)."""
from __future__ import annotations

import io
import logging
import os
import pickle
import sys
import types

import numpy as np
import sympy

from . import cache
from .compile.passes import run_pipeline
from .ir import IRModule

log = logging.getLogger("relaxjax.cache")

_LOWERED_MAX_BYTES = 16 << 20
# modules whose functions and classes the key may name (pickle stores them by name): their
# code is covered by the source digest or the versions in the key
_KEY_MODULES = ("relaxjax", "numpy", "sympy", "builtins", "math", "operator", "collections", "fractions")


class _KeyPickler(pickle.Pickler):
    """Pickles the traced module for the key, refusing functions and classes from elsewhere
    (a user's callable stored by name could change without the key changing)."""

    def reducer_override(self, obj):
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
            mod = getattr(obj, "__module__", None) or ""
            if mod.split(".")[0] not in _KEY_MODULES:
                raise pickle.PicklingError(f"{obj!r} from {mod or 'an unknown module'} in a traced module")
        return NotImplemented


def lower_cached(module: IRModule, pipeline: list) -> IRModule:
    """``run_pipeline(module, pipeline)`` for the default pipeline, through the persistent
    cache: the lowered module is stored pickled, keyed by the pickled traced module (all the
    pipeline reads), the passes' names, relaxjax's source digest and the versions of Python,
    NumPy and SymPy.  Skipped (the pipeline runs) when the cache is off, when IR dumps or
    verification are asked for, or when the module does not pickle or pickles to more than
    ``_LOWERED_MAX_BYTES`` (large constants); an entry that does not unpickle is ignored and
    rewritten."""
    if not cache.enabled() or os.environ.get("RELAXJAX_DUMP_IR", "0") not in ("", "0") or \
            os.environ.get("RELAXJAX_VERIFY", "0") not in ("", "0"):
        return run_pipeline(module, pipeline)
    try:
        buf = io.BytesIO()
        _KeyPickler(buf, protocol=5).dump(module)
        traced = buf.getvalue()
    except Exception:                        # noqa: BLE001 (a value that does not pickle)
        return run_pipeline(module, pipeline)
    if len(traced) > _LOWERED_MAX_BYTES:     # large constants: not worth a disk entry
        return run_pipeline(module, pipeline)
    parts = (traced, tuple(p.name for p in pipeline), cache.source_digest(),
             "%d.%d" % sys.version_info[:2], np.__version__, sympy.__version__)
    data = cache.get("lowered", parts)
    if data is not None:
        try:
            lowered = pickle.loads(data)
            if isinstance(lowered, IRModule):
                return lowered
        except Exception as e:               # noqa: BLE001 (stale or damaged: recompute)
            log.info("relaxjax cache: ignoring a lowered module that does not load (%s)", e)
    lowered = run_pipeline(module, pipeline)
    try:
        cache.put("lowered", parts, pickle.dumps(lowered, protocol=5))
    except Exception as e:                   # noqa: BLE001
        log.info("relaxjax cache: not storing a lowered module that does not pickle (%s)", e)
    return lowered
