"""``fori_loop`` and ``scan`` in native code: a loop body that compiled to one native
segment runs its whole trip count in one call, no Python per iteration.

The body's buffers are allocated once per loop (its shapes do not change between
iterations) and the carries are double-buffered: three tuples of buffers, each what the
segment reads and writes for one iteration — the first reads the loop's initial carries
and writes set Y, then the others alternate, reading Y and writing Z, reading Z and writing
Y.  A small LLVM driver runs the iterations: it stores the loop index (``fori_loop``),
copies each scanned input's slice ``xs[t]`` into the body's parameter buffer, calls the
segment with the tuple of the iteration, and copies each stacked output into ``ys[t]``
(``scan``).  Bodies this does not fit (host operations between kernels, a carry returned
from another carry's place) run through the host driver
(:class:`~relaxjax.backends.control_flow.ControlFlowRunner`).
"""
from __future__ import annotations

import ctypes
import math
import threading

import numpy as np

from ...compile.memplan import byte_size
from ...ir import Binding, Var
from ...shapes import eval_dim, is_symbolic
from ...tir.analysis import inplace_input
from ...tir.index_checks import ERROR_RECORD
from ..control_flow import ControlFlowRunner
from .buffer_pool import POOL
from .runner_memory import POOL_MIN_BYTES
from .engine import compile_llvm, native_code
from .host import ARRAY_DATA_OFFSET, TUPLE_ITEMS_OFFSET, Segment

_OBJ = ctypes.py_object
_DRIVER = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, _OBJ, _OBJ, _OBJ, _OBJ, _OBJ,
                           ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _OBJ, _OBJ, ctypes.c_int64,
                           _OBJ, _OBJ, ctypes.c_int64,
                           ctypes.c_void_p, _OBJ, _OBJ, _OBJ, _OBJ, _OBJ)
# a status of while_loop's cond segment (not the body's)
COND_ERROR = 1 << 61
_DRIVERS: dict = {}
_LOCK = threading.Lock()
# A scanned input is two arrays (the body's parameter, xs) and two numbers (xs's stride and
# the slice's bytes); a stacked output is four arrays (the body's result in the first, odd
# and even iterations' tuples, ys) and the same two numbers.  The driver reads each array's
# data pointer from the object, as segments do (cheaper than fetching it in Python).
X_ARRAYS, Y_ARRAYS = 2, 4


def _data(k: str, tup: str, tag: str) -> str:
    """LLVM lines loading the data pointer of array ``tup[k]`` into ``%<tag>``."""
    return f"""  %{tag}.o = mul i64 {k}, 8
  %{tag}.i = add i64 %{tag}.o, {TUPLE_ITEMS_OFFSET}
  %{tag}.p = getelementptr i8, ptr {tup}, i64 %{tag}.i
  %{tag}.a = load ptr, ptr %{tag}.p
  %{tag}.d = getelementptr i8, ptr %{tag}.a, i64 {ARRAY_DATA_OFFSET}
  %{tag} = load ptr, ptr %{tag}.d
"""


def _driver(bits: int):
    """``i64 drive(seg, t0, ta, tb, dims, idx, lo, hi, rev, xa, xn, nx, ya, yn, ny)``: for i
    in [lo, hi), with t = i (or hi - 1 - (i - lo) when ``rev``): store t (an integer of
    ``bits``) in array ``idx``, copy the nx slices that ``xa``/``xn`` describe, call
    ``seg(tuple, dims)`` with t0 first, then ta, tb, ta, ..., copy the ny outputs that
    ``ya``/``yn`` describe; returns the first nonzero status of a segment, else 0."""
    with _LOCK:
        if bits in _DRIVERS:
            return _DRIVERS[bits]
        store = "%t" if bits == 64 else "%tt"
        text = f"""
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

define i64 @rj_loop_driver(ptr %seg, ptr %t0, ptr %ta, ptr %tb, ptr %dims, ptr %idxa, i64 %lo, i64 %hi, i64 %rev, ptr %xa, ptr %xna, i64 %nx, ptr %ya, ptr %yna, i64 %ny, ptr %cseg, ptr %c0, ptr %ca, ptr %cb, ptr %cdims, ptr %cresa) {{
entry:
  %hascond = icmp ne ptr %cseg, null
  %cresp = getelementptr i8, ptr %cresa, i64 {ARRAY_DATA_OFFSET}
  %cres = load ptr, ptr %cresp
  %go = icmp slt i64 %lo, %hi
  %isrev = icmp ne i64 %rev, 0
  %hm1 = sub i64 %hi, 1
  %idxp = getelementptr i8, ptr %idxa, i64 {ARRAY_DATA_OFFSET}
  %idx = load ptr, ptr %idxp
  %xnp = getelementptr i8, ptr %xna, i64 {ARRAY_DATA_OFFSET}
  %xn = load ptr, ptr %xnp
  %ynp = getelementptr i8, ptr %yna, i64 {ARRAY_DATA_OFFSET}
  %yn = load ptr, ptr %ynp
  br i1 %go, label %loop, label %done
loop:
  %i = phi i64 [ %lo, %entry ], [ %next, %yend ]
  %j = sub i64 %i, %lo
  %ri = sub i64 %hm1, %j
  %t = select i1 %isrev, i64 %ri, i64 %i
  {"" if bits == 64 else f"%tt = trunc i64 %t to i{bits}"}
  store i{bits} {store}, ptr %idx
  %first = icmp eq i64 %j, 0
  %bit = and i64 %j, 1
  %odd = icmp ne i64 %bit, 0
  br i1 %hascond, label %cond, label %xhead
cond:
  %ctab = select i1 %odd, ptr %ca, ptr %cb
  %ctup = select i1 %first, ptr %c0, ptr %ctab
  %cr = call i64 %cseg(ptr %ctup, ptr %cdims)
  %cbad = icmp ne i64 %cr, 0
  br i1 %cbad, label %cfail, label %ctest
ctest:
  %cv = load i8, ptr %cres
  %cgo = icmp ne i8 %cv, 0
  br i1 %cgo, label %xhead, label %done
cfail:
  %crr = or i64 %cr, {COND_ERROR}
  ret i64 %crr
xhead:
  %k = phi i64 [ 0, %loop ], [ 0, %ctest ], [ %k1, %xbody ]
  %xmore = icmp slt i64 %k, %nx
  br i1 %xmore, label %xbody, label %call
xbody:
  %k2 = mul i64 %k, 2
  %k2b = add i64 %k2, 1
{_data("%k2", "%xa", "xdst")}{_data("%k2b", "%xa", "xbase")}
  %xsp = getelementptr i64, ptr %xn, i64 %k2
  %xstride = load i64, ptr %xsp
  %xbp = getelementptr i64, ptr %xn, i64 %k2b
  %xbytes = load i64, ptr %xbp
  %xoff = mul i64 %t, %xstride
  %xsrc = getelementptr i8, ptr %xbase, i64 %xoff
  call void @llvm.memcpy.p0.p0.i64(ptr %xdst, ptr %xsrc, i64 %xbytes, i1 false)
  %k1 = add i64 %k, 1
  br label %xhead
call:
  %tab = select i1 %odd, ptr %ta, ptr %tb
  %tup = select i1 %first, ptr %t0, ptr %tab
  %r = call i64 %seg(ptr %tup, ptr %dims)
  %bad = icmp ne i64 %r, 0
  br i1 %bad, label %fail, label %yhead
yhead:
  %m = phi i64 [ 0, %call ], [ %m1, %ybody ]
  %ymore = icmp slt i64 %m, %ny
  br i1 %ymore, label %ybody, label %yend
ybody:
  %m4 = mul i64 %m, 4
  %m4b = add i64 %m4, 1
  %m4c = add i64 %m4, 2
  %m4d = add i64 %m4, 3
{_data("%m4", "%ya", "yfirst")}{_data("%m4b", "%ya", "yodd")}{_data("%m4c", "%ya", "yeven")}{_data("%m4d", "%ya", "ybase")}
  %m2 = mul i64 %m, 2
  %m2b = add i64 %m2, 1
  %ysp = getelementptr i64, ptr %yn, i64 %m2
  %ystride = load i64, ptr %ysp
  %ybp = getelementptr i64, ptr %yn, i64 %m2b
  %ybytes = load i64, ptr %ybp
  %ysrc1 = select i1 %odd, ptr %yodd, ptr %yeven
  %ysrc = select i1 %first, ptr %yfirst, ptr %ysrc1
  %yoff = mul i64 %t, %ystride
  %ydst = getelementptr i8, ptr %ybase, i64 %yoff
  call void @llvm.memcpy.p0.p0.i64(ptr %ydst, ptr %ysrc, i64 %ybytes, i1 false)
  %m1 = add i64 %m, 1
  br label %yhead
yend:
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %hi
  br i1 %more, label %loop, label %done
fail:
  ret i64 %r
done:
  ret i64 0
}}
"""
        # a shared library through the persistent cache where there is one: a warm process
        # loads it rather than compiling it in memory
        try:
            cm = compile_llvm(text, [], native_code())
        except (OSError, RuntimeError):       # no usable linker or loader
            cm = compile_llvm(text, [])
        fn = _DRIVERS[bits] = (_DRIVER(cm.address("rj_loop_driver")), cm)
        return fn


def _one_segment(exe) -> bool:
    """Whether a region compiled to one native segment that binds no dim as it runs."""
    return len(exe.steps) == 1 and isinstance(exe.steps[0], Segment) and \
        set(exe.dim_names) <= {s.name for s in exe.fn.dim_vars}


def _computed(exe) -> set:
    return {v for c in exe.steps[0].calls for v in c.outvars}


class NativeLoop:
    """The native plan of one ``fori_loop``, ``scan`` or ``while_loop`` binding, or None from
    :meth:`plan`.

    ``fori_loop``'s body takes (index, carries, consts) and returns its carries;
    ``scan``'s takes (slices of xs, carries, consts) and returns (carries, ys);
    ``while_loop``'s takes (carries, consts) and returns its carries, and its cond takes
    (carries, cond consts) and returns a boolean scalar, read after each call."""

    def __init__(self, b: Binding, body, cond=None):
        self.body, self.cond = body, cond
        self.kind = b.callee.name
        self.scan = self.kind == "scan"
        fn = body.fn
        self.n = b.params["n_carry"]
        self.nx = b.params["n_xs"] if self.scan else 0
        self.n_cond_consts = b.params.get("n_cond_consts", 0)
        first = _first_carry(b)
        self.index_param = fn.params[0] if self.kind == "fori_loop" else None
        self.x_params = fn.params[:self.nx]
        self.carry_params = fn.params[first:first + self.n]
        self.const_params = fn.params[first + self.n:]
        self.carry_results = list(fn.results[:self.n])
        self.y_results = list(fn.results[self.n:])
        self.length = b.params.get("length")
        self.reverse = bool(b.params.get("reverse", False))
        self.segment = body.steps[0]
        self.seg_address = body.segment_module.address(self.segment.name)
        self.outvars = [v for c in self.segment.calls for v in c.outvars]
        self.itype = fn.params[0].type.dtype if self.index_param is not None else np.dtype(np.int64)
        self.driver = _driver(8 * self.itype.itemsize)
        self.fresh = [k for k, r in enumerate(self.carry_results) if r is not self.carry_params[k]]
        self.in_place = _updated_in_place(self.segment.calls, self.carry_params, self.carry_results,
                                          self.fresh, fn.results)
        # what every iteration's tuple holds before the loop's own buffers: the constants
        self.template = _template(body)
        names = list(body.dim_names)
        if self.scan and is_symbolic(self.length):
            names += sorted({s.name for s in self.length.free_symbols} - set(names))
        if cond is not None:
            names += [d for d in cond.dim_names if d not in names]
            self.cond_template = _template(cond)
            self.cond_address = cond.segment_module.address(cond.steps[0].name)
            self.cond_outvars = [v for c in cond.steps[0].calls for v in c.outvars]
        self.key_names = names
        self.layouts: dict = {}

    @staticmethod
    def plan(b: Binding, body, cond=None) -> "NativeLoop | None":
        """A plan when the body is one native segment whose carry results are each a value
        it computes (once) or its own carry passed through, whose stacked outputs are
        buffers it holds, and (while_loop) whose cond is one native segment computing its
        predicate."""
        if not _one_segment(body):
            return None
        fn = body.fn
        n, first = b.params["n_carry"], _first_carry(b)
        computed = _computed(body)
        seen = set()
        for k, r in enumerate(fn.results[:n]):
            if not isinstance(r, Var) or r in seen:
                return None
            seen.add(r)
            if r is not fn.params[first + k] and r not in computed:
                return None
        if any(not isinstance(r, Var) or r not in body.slot_of for r in fn.results[n:]):
            return None
        if cond is not None and not (_one_segment(cond) and cond.fn.results[0] in _computed(cond)
                                     and cond.fn.results[0].type.dtype == np.bool_):
            return None
        return NativeLoop(b, body, cond)

    def _layout(self, D: dict) -> "_Layout":
        """The shapes of one loop's buffers, computed once per distinct value of the dims
        they depend on (a nested loop runs with the same ones again and again)."""
        key = tuple(D[name] for name in self.key_names)
        lay = self.layouts.get(key)
        if lay is None:
            if len(self.layouts) > 64:
                self.layouts.clear()
            lay = self.layouts[key] = _Layout(self, D)
        return lay

    def run(self, D: dict, args: list) -> list:
        """fori_loop's args: (lo, hi, carries, consts); scan's: (carries, xs, consts);
        while_loop's: (carries, cond consts, body consts)."""
        n, slot, lay = self.n, self.body.slot_of, self._layout(D)
        cond_consts = ()
        if self.scan:
            lo, hi = 0, lay.length
            carry_args, xs, const_args = args[:n], args[n:n + self.nx], args[n + self.nx:]
        elif self.cond is not None:
            lo, hi = 0, 1 << 62
            nc = self.n_cond_consts
            carry_args, xs, cond_consts, const_args = args[:n], (), args[n:n + nc], args[n + nc:]
        else:
            lo, hi = int(args[0]), int(args[1])
            carry_args, xs, const_args = args[2:2 + n], (), args[2 + n:]
        carry0 = [_contiguous(np.asarray(a, p.type.dtype)) for a, p in zip(carry_args, self.carry_params)]
        ys = [np.empty((max(hi - lo, 0),) + shape, r.type.dtype) for r, shape in zip(self.y_results, lay.y_shapes)]
        if hi <= lo:
            return carry0 + ys
        frame = lay.frames.pop() if lay.frames else self._frame(lay)
        base = list(frame)
        idx = np.zeros((), self.itype)
        if self.index_param is not None:
            base[slot[self.index_param]] = idx
        xs = [_contiguous(np.asarray(x, p.type.dtype)) for x, p in zip(xs, self.x_params)]
        for p, a in zip(self.carry_params, carry0):
            base[slot[p]] = a
        for p, a in zip(self.const_params, const_args):
            base[slot[p]] = _contiguous(np.asarray(a))
        for k, shape, dtype in lay.escaping:
            base[k] = _pooled(shape, dtype)
        fresh = self.fresh
        y = {k: base[slot[self.carry_results[k]]] for k in fresh}
        # a carry the body updates in place reads and writes one buffer after the first
        # iteration (which reads the caller's array): no second buffer
        z = {k: y[k] if k in self.in_place else _pooled(shape, self.carry_results[k].type.dtype)
             for k, shape in zip(fresh, lay.z_shapes)}      # (results are unplanned)
        ta, tb = list(base), list(base)
        for k in fresh:
            p, r = slot[self.carry_params[k]], slot[self.carry_results[k]]
            ta[p], ta[r] = y[k], z[k]
            tb[p], tb[r] = z[k], y[k]
        xa = tuple(a for p, x in zip(self.x_params, xs) for a in (base[slot[p]], x))
        ya = tuple(a for r, out in zip(self.y_results, ys)
                   for a in (base[slot[r]], ta[slot[r]], tb[slot[r]], out))
        cond = self._cond_tuples(carry0, cond_consts, y, z, lay) if self.cond is not None else \
            (None, _NONE, _NONE, _NONE, _NONE, _NONE)
        drive, _ = self.driver
        dims = lay.dims.copy()
        status = drive(self.seg_address, tuple(base), tuple(ta), tuple(tb), dims, idx, lo, hi,
                       int(self.reverse), xa, lay.x_numbers, len(xs), ya, lay.y_numbers, len(ys),
                       *cond)
        if status & COND_ERROR:
            self.cond._library_error(0, status & ~COND_ERROR, list(cond[1]), D, cond[4])
        elif status:
            # which tuple the failing iteration used does not matter for the message:
            # the index buffers are the body's own (or loop-invariant) values
            self.body._library_error(0, status, base, D, dims)
        if lay.frame_bytes <= KEEP_FRAME_BYTES:
            lay.frames.append(frame)
        count = int(idx) if self.cond is not None else hi - lo
        if count == 0:
            return carry0 + ys
        last = y if count % 2 == 1 else z
        return [last[k] if k in last else carry0[k] for k in range(n)] + ys

    def _frame(self, lay: "_Layout") -> list:
        """A loop's buffers that no result escapes with: the constants, the slices of xs
        and the body's intermediates (views of its storages where its memory plan shares
        one: lifetimes that do not overlap; large ones from the reuse pool, as fresh memory
        would page-fault on every loop).  Loops of the same layout reuse a frame; one in
        use (a nested or concurrent run of the same loop) is not handed out again."""
        frame = list(self.template)
        slot = self.body.slot_of
        for p, shape in zip(self.x_params, lay.x_shapes):
            frame[slot[p]] = np.empty(shape, p.type.dtype)
        blocks = [_pooled((size,), _BYTE) for size in lay.storage_bytes]
        for k, shape, dtype, storage, nbytes in lay.outvars:
            frame[k] = _pooled(shape, dtype) if storage is None else \
                blocks[storage][:nbytes].view(dtype).reshape(shape)
        return frame

    def _cond_tuples(self, carry0: list, consts, y: dict, z: dict, lay: "_Layout") -> tuple:
        """while_loop's cond's arguments to the driver: its segment, its tuples for the
        first, odd and even iterations (reading the carries the body reads then), its dims
        and its predicate's buffer."""
        cond = self.cond
        slot, params = cond.slot_of, cond.fn.params
        c0 = list(self.cond_template)
        for p, a in zip(params, carry0 + [_contiguous(np.asarray(a)) for a in consts]):
            c0[slot[p]] = a
        for v, shape in zip(self.cond_outvars, lay.cond_shapes):
            c0[slot[v]] = np.empty(shape, v.type.dtype)
        ca, cb = list(c0), list(c0)
        for k in self.fresh:
            ca[slot[params[k]]], cb[slot[params[k]]] = y[k], z[k]
        return (self.cond_address, tuple(c0), tuple(ca), tuple(cb), lay.cond_dims.copy(),
                c0[slot[cond.fn.results[0]]])


def _updated_in_place(calls: list, params: list, results: list, fresh: list, body_results) -> set:
    """The carries (by position) whose new value a program of the body writes by updating
    the carry itself (``tir.analysis.inplace_input``: ``x.at[i].set(v)``, a slice update)
    and that nothing after that program reads: the body may then write it into the buffer
    it read it from, and the update's copy of the rest is skipped (``codegen``), so a step
    costs the update, not a pass over the carry."""
    out = set()
    for k in fresh:
        p, r = params[k], results[k]
        for i, c in enumerate(calls):
            if r not in c.outvars:
                continue
            j = inplace_input(c.callee) if c.kind == "tir" and len(c.outvars) == 1 else None
            later = any(p in d.args for d in calls[i + 1:])
            if j is not None and c.args[j] is p and not later and p not in body_results:
                out.add(k)
            break
    return out


def _first_carry(b: Binding) -> int:
    """Where a loop body's carries start among its parameters."""
    return {"fori_loop": 1, "scan": b.params.get("n_xs", 0)}.get(b.callee.name, 0)


def _template(exe) -> list:
    t = [None] * len(exe.slot_of)
    for k, c in exe.consts.items():
        t[k] = c
    return t


def _dims_array(exe, D: dict) -> np.ndarray:
    """A region's dims, then the record a failing index check fills (see tir.index_checks):
    copied for each run, so that no run sees another's record."""
    dims = np.zeros(len(exe.dim_names) + ERROR_RECORD, np.int64)
    for name, k in exe.dim_slot.items():
        dims[k] = D[name]
    return dims


_NONE = np.zeros(1, np.int64)       # (a placeholder array where a loop has no cond)
_BYTE = np.dtype(np.uint8)
# a frame is kept for the next run when this small (a larger one returns to the reuse pool:
# a function called with many shapes would otherwise hold a frame for each)
KEEP_FRAME_BYTES = 1 << 20


class _Layout:
    """What one loop's buffers are for one value of its dims: shapes, the body's storages
    and the numbers the driver's copies need (each slice of xs and ys is C-contiguous, so
    its bytes are one run)."""

    def __init__(self, loop: NativeLoop, D: dict):
        body = loop.body
        plan = body.memory_plan
        self.length = _eval(loop.length, D) if loop.scan else 0
        self.x_shapes = [_shape(p, D) for p in loop.x_params]
        self.y_shapes = [_shape(r, D) for r in loop.y_results]
        self.z_shapes = [_shape(loop.carry_results[k], D) for k in loop.fresh]
        storages: dict = {}
        self.outvars = []
        for v in loop.outvars:
            st = plan.storage_of.get(v) if plan is not None else None
            if st is not None and st.index not in storages:
                storages[st.index] = (len(storages), max(eval_dim(st.size, D), 1))
            self.outvars.append((body.slot_of[v], _shape(v, D), v.type.dtype,
                                 None if st is None else storages[st.index][0],
                                 eval_dim(byte_size(v), D)))
        self.storage_bytes = [size for _, size in sorted(storages.values())]
        # the carries' results leave with the loop: allocated per run (stacked outputs are
        # copied out; the rest is allocated once per frame)
        results = {body.slot_of[r] for r in loop.carry_results}
        self.escaping = [(k, shape, dtype) for k, shape, dtype, _, _ in self.outvars
                         if k in results]
        self.outvars = [o for o in self.outvars if o[0] not in results]
        self.frames: list = []          # (list.pop and append are atomic: threads may share)
        self.frame_bytes = sum(self.storage_bytes) + sum(o[4] for o in self.outvars if o[3] is None) \
            + sum(_nbytes(shape, p.type.dtype) for p, shape in zip(loop.x_params, self.x_shapes))
        self.x_numbers = np.array([b for p, shape in zip(loop.x_params, self.x_shapes)
                                   for b in (_nbytes(shape, p.type.dtype),) * 2] or [0], np.int64)
        self.y_numbers = np.array([b for r, shape in zip(loop.y_results, self.y_shapes)
                                   for b in (_nbytes(shape, r.type.dtype),) * 2] or [0], np.int64)
        self.dims = _dims_array(body, D)
        if loop.cond is not None:
            self.cond_dims = _dims_array(loop.cond, D)
            self.cond_shapes = [_shape(v, D) for v in loop.cond_outvars]


def _eval(d, D: dict) -> int:
    return eval_dim(d, D) if is_symbolic(d) else int(d)


def _nbytes(shape: tuple, dtype: np.dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def _shape(v: Var, D: dict) -> tuple:
    return tuple(eval_dim(d, D) for d in v.type.shape)


def _pooled(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """An aligned array whose memory comes from, and returns to, the reuse pool when large."""
    n = _nbytes(shape, dtype)
    if n < POOL_MIN_BYTES:
        return np.empty(shape, dtype)
    blk = POOL.take(n)
    blk = POOL.new(n) if blk is None else blk
    flat = np.frombuffer(memoryview(blk), dtype)     # (see runner_memory: the base is blk's)
    POOL.put_when_dead(flat, blk)
    return flat.reshape(shape)


def _contiguous(a: np.ndarray) -> np.ndarray:
    return a if a.flags.c_contiguous else np.array(a, order="C")


class LLVMControlFlow(ControlFlowRunner):
    """The host driver, with loop bodies (and conds) that fit running natively."""

    def __init__(self, b: Binding, make_executable):
        super().__init__(b, make_executable)
        self.native = None
        if self.name in ("fori_loop", "scan"):
            self.native = NativeLoop.plan(b, self._exe(b.params["body"]))
        elif self.name == "while_loop":
            self.native = NativeLoop.plan(b, self._exe(b.params["body"]), self._exe(b.params["cond"]))

    def _while_loop(self, D: dict, args: list, empty) -> list:
        if self.native is not None:
            return self.native.run(D, args)
        return super()._while_loop(D, args, empty)

    def _fori_loop(self, D: dict, args: list, empty) -> list:
        if self.native is not None:
            return self.native.run(D, args)
        return super()._fori_loop(D, args, empty)

    def _scan(self, D: dict, args: list, empty) -> list:
        if self.native is not None:
            return self.native.run(D, args)
        return super()._scan(D, args, empty)
