"""``fori_loop`` in native code: a loop body that compiled to one native segment runs its
whole trip count in one call, no Python per iteration.

The body's buffers are allocated once per loop (its shapes do not change between
iterations) and the carries are double-buffered: three tuples of buffers, each what the
segment reads and writes for one iteration — the first reads the loop's initial carries
and writes set Y, then the others alternate, reading Y and writing Z, reading Z and writing
Y — and a small LLVM driver stores the loop index and calls the segment with the tuple of
each iteration.  Bodies this does not fit (host operations between kernels, a carry
returned from another carry's place) run through the host driver
(:class:`~relaxjax.backends.control_flow.ControlFlowRunner`).
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from ...compile.memplan import byte_size
from ...ir import Binding, Var
from ...shapes import eval_dim
from ...tir.index_checks import ERROR_RECORD
from ..control_flow import ControlFlowRunner
from .buffer_pool import POOL, _aligned_block
from .runner_memory import POOL_MIN_BYTES
from .engine import compile_llvm
from .host import Segment

_DRIVER = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.py_object, ctypes.py_object,
                           ctypes.py_object, ctypes.py_object, ctypes.c_void_p, ctypes.c_int64,
                           ctypes.c_int64)
_DRIVERS: dict = {}
_LOCK = threading.Lock()


def _driver(bits: int):
    """``i64 drive(seg, t0, ta, tb, dims, idx, lo, hi)``: for i in [lo, hi) store i (as an
    integer of ``bits``) at ``idx`` and call ``seg(t, dims)`` with t0 first, then ta, tb, ta,
    ...; returns the first nonzero status of a segment, else 0."""
    with _LOCK:
        if bits in _DRIVERS:
            return _DRIVERS[bits]
        store = "%i" if bits == 64 else "%ti"
        text = f"""
define i64 @rj_fori_driver(ptr %seg, ptr %t0, ptr %ta, ptr %tb, ptr %dims, ptr %idx, i64 %lo, i64 %hi) {{
entry:
  %go = icmp slt i64 %lo, %hi
  br i1 %go, label %loop, label %done
loop:
  %i = phi i64 [ %lo, %entry ], [ %next, %cont ]
  {"" if bits == 64 else f"%ti = trunc i64 %i to i{bits}"}
  store i{bits} {store}, ptr %idx
  %j = sub i64 %i, %lo
  %first = icmp eq i64 %j, 0
  %bit = and i64 %j, 1
  %odd = icmp ne i64 %bit, 0
  %tab = select i1 %odd, ptr %ta, ptr %tb
  %t = select i1 %first, ptr %t0, ptr %tab
  %r = call i64 %seg(ptr %t, ptr %dims)
  %bad = icmp ne i64 %r, 0
  br i1 %bad, label %fail, label %cont
cont:
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %hi
  br i1 %more, label %loop, label %done
fail:
  ret i64 %r
done:
  ret i64 0
}}
"""
        cm = compile_llvm(text, [])
        fn = _DRIVERS[bits] = (_DRIVER(cm.address("rj_fori_driver")), cm)
        return fn


class NativeFori:
    """The native plan of one ``fori_loop`` binding, or None from :meth:`plan`."""

    def __init__(self, b: Binding, body):
        self.body = body
        self.n = b.params["n_carry"]
        fn = body.fn
        self.segment = body.steps[0]
        self.seg_address = body.segment_module.address(self.segment.name)
        self.itype = fn.params[0].type.dtype
        self.carry_params = fn.params[1:1 + self.n]
        self.results = list(fn.results)
        self.outvars = [v for c in self.segment.calls for v in c.outvars]
        self.driver = _driver(8 * self.itype.itemsize)

    @staticmethod
    def plan(b: Binding, body) -> "NativeFori | None":
        """A plan when the body is one native segment whose results are each a value it
        computes (once) or its own carry passed through."""
        if len(body.steps) != 1 or not isinstance(body.steps[0], Segment):
            return None
        fn = body.fn
        n = b.params["n_carry"]
        computed = {v for c in body.steps[0].calls for v in c.outvars}
        seen = set()
        for k, r in enumerate(fn.results):
            if not isinstance(r, Var) or r in seen:
                return None
            seen.add(r)
            if r is not fn.params[1 + k] and r not in computed:
                return None
        if not set(body.dim_names) <= {s.name for s in fn.dim_vars}:
            return None             # a dim the body binds as it runs
        return NativeFori(b, body)

    def run(self, D: dict, args: list) -> list:
        body, n = self.body, self.n
        lo, hi = int(args[0]), int(args[1])
        carry0 = [_contiguous(np.asarray(a, p.type.dtype)) for a, p in zip(args[2:2 + n], self.carry_params)]
        if hi <= lo:
            return carry0
        consts = [_contiguous(np.asarray(a)) for a in args[2 + n:]]
        dims = np.zeros(len(body.dim_names) + ERROR_RECORD, np.int64)     # dims, error record
        for name, k in body.dim_slot.items():
            dims[k] = D[name]
        slot = body.slot_of
        idx = np.zeros((), self.itype)
        base = [None] * len(slot)
        base[0] = idx
        for p, a in zip(self.carry_params, carry0):
            base[slot[p]] = a
        for k, a in enumerate(consts):
            base[1 + n + k] = a
        for k, c in body.consts.items():
            base[k] = c

        plan, blocks = body.memory_plan, {}

        def alloc(v):
            """A value's buffer: a view of its storage when the body's memory plan shares
            one (intermediates whose lifetimes do not overlap), else its own array; large
            ones from the reuse pool (fresh memory would page-fault on every loop)."""
            shape = tuple(eval_dim(d, D) for d in v.type.shape)
            st = plan.storage_of.get(v) if plan is not None else None
            if st is None:
                return _pooled(shape, v.type.dtype)
            if st.index not in blocks:
                blocks[st.index] = _pooled((max(eval_dim(st.size, D), 1),), np.dtype(np.uint8))
            n = eval_dim(byte_size(v), D)
            return blocks[st.index][:n].view(v.type.dtype).reshape(shape)
        for v in self.outvars:
            base[slot[v]] = alloc(v)
        fresh = [k for k, r in enumerate(self.results) if r is not self.carry_params[k]]
        y = {k: base[slot[self.results[k]]] for k in fresh}
        z = {k: alloc(self.results[k]) for k in fresh}     # (results are unplanned: own arrays)
        ta, tb = list(base), list(base)
        for k in fresh:
            p, r = slot[self.carry_params[k]], slot[self.results[k]]
            ta[p], ta[r] = y[k], z[k]
            tb[p], tb[r] = z[k], y[k]
        drive, _ = self.driver
        status = drive(self.seg_address, tuple(base), tuple(ta), tuple(tb), dims,
                       idx.ctypes.data, lo, hi)
        if status:
            # which tuple the failing iteration used does not matter for the message:
            # the index buffers are the body's own (or loop-invariant) values
            body._library_error(0, status, base, D, dims)
        last = y if (hi - lo) % 2 == 1 else z
        return [last[k] if k in last else carry0[k] for k in range(n)]


def _pooled(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """An aligned array whose memory comes from, and returns to, the reuse pool when large."""
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if n < POOL_MIN_BYTES:
        return np.empty(shape, dtype)
    blk = POOL.take(n)
    blk = _aligned_block(n) if blk is None else blk
    flat = np.frombuffer(memoryview(blk), dtype)     # (see runner_memory: the base is blk's)
    POOL.put_when_dead(flat, blk)
    return flat.reshape(shape)


def _contiguous(a: np.ndarray) -> np.ndarray:
    return a if a.flags.c_contiguous else np.array(a, order="C")


class LLVMControlFlow(ControlFlowRunner):
    """The host driver, with ``fori_loop`` bodies that fit running natively."""

    def __init__(self, b: Binding, make_executable):
        super().__init__(b, make_executable)
        self.native = NativeFori.plan(b, self._exe(b.params["body"])) if self.name == "fori_loop" else None

    def _fori_loop(self, D: dict, args: list, empty) -> list:
        if self.native is not None:
            return self.native.run(D, args)
        return super()._fori_loop(D, args, empty)
