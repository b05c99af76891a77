"""The host side of a compiled graph function.

The lowered graph function becomes a *plan*: every buffer value gets a slot in a tuple of
arrays, every dim a slot in an int64 array.  Runs of ``call_tir`` / ``call_library``
bindings become one native *segment* function ``void seg(PyObject *buffers, PyObject *dims)``
that calls the kernels and BLAS in order, so a call costs one ctypes transition per segment.  Host
operations between segments (reshape views, match_cast checks, data-dependent ops whose
output size must be read before allocating) run in Python.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ... import tir
from ...tir import INDEX, Const, from_sympy
from ...tir.index_checks import data_index_checks
from ...ir import Binding
from .codegen import KernelEmitter, _Fn
from .irtypes import SEGMENT_OPTNONE, llty
from . import gemm, gemm_rule, target

# library calls the segment emits as CBLAS gemms: real, and complex on packed operands
# (..., M, K, 2), each (re, im) pair one complex element
# ("_nt", "_tn", "_tt": the operands given untransposed, read through CBLAS's transpose flags)
_GEMM_LETTER = {f"blas.{letter}gemm{form}": letter for letter in "sdcz"
                for form in ("", "_nt", "_tn", "_tt") if letter in "sd" or not form}
GEMMS = tuple(_GEMM_LETTER)
# ... and as CBLAS syrks (Gram products A @ A.T, and A.T @ A for "_tn": compile.blas_calls)
SYRKS = ("blas.ssyrk", "blas.dsyrk", "blas.ssyrk_tn", "blas.dsyrk_tn")
# a segment's status for a failing host check, such as a gather index out of range (below
# it: the call's position + 1 << 32, as for a failing library call)
INDEX_ERROR = 1 << 62

# the batched gemm loop's counter in TIR expressions: a name no dim can have (a dim ``t``
# took its place before)
BATCH_COUNTER = "gemm.t"

# CPython's tuple keeps its items after a 24-byte header; NumPy's array object keeps its data
# pointer 16 bytes in.  ``check_object_layout`` verifies both at start-up.
TUPLE_ITEMS_OFFSET = 24
ARRAY_DATA_OFFSET = 16


def check_object_layout() -> None:
    import ctypes
    a = np.empty(3)
    t = (a,)
    if ctypes.c_void_p.from_address(id(t) + TUPLE_ITEMS_OFFSET).value != id(a) or \
            ctypes.c_void_p.from_address(id(a) + ARRAY_DATA_OFFSET).value != a.ctypes.data:
        raise RuntimeError("relaxjax's LLVM backend does not know this Python/NumPy object layout "
                           "(tuple items at 24, array data at 16); use backend='numpy'")


def _batch_strides(out_shape, a_shape, b_shape) -> tuple | None:
    """The strides (elements, TIR expressions) between consecutive products of a batched
    matmul's contiguous operands and output, when each operand either has the output's
    batch dims (a matrix per product) or none but ones (one matrix for all: stride 0);
    None for any other broadcast (such as (b, 1, m, k) @ (1, h, k, n)), which the
    per-product loop reads."""
    nb = len(out_shape) - 2
    strides = []
    for shape in (a_shape, b_shape, out_shape):
        batch = tuple(shape[:-2])
        if len(batch) == nb and all(d == o for d, o in zip(batch, out_shape[:nb])):
            strides.append(from_sympy(shape[-2]) * from_sympy(shape[-1]))
        elif all(isinstance(d, int) and d == 1 for d in batch):
            strides.append(Const(0, INDEX))
        else:
            return None
    return tuple(strides)


def _viewed_strides(shape: tuple, perm) -> list:
    """The element strides (TIR expressions) along each axis of an array of ``shape``
    stored row-major, or, with ``perm``, of its transpose by ``perm`` (a view of it)."""
    strides, step = [], Const(1, INDEX)
    for d in reversed(shape):
        strides.append(step)
        step = step * from_sympy(d)
    strides.reverse()
    return [strides[p] for p in perm] if perm else strides


@dataclass
class Segment:
    name: str
    calls: list = field(default_factory=list)       # bindings (tir or library)


@dataclass
class HostOp:
    binding: Binding


def python_library(b: Binding) -> bool:
    """Whether a library call runs as a Python host call (else natively in a segment): by
    the registration of its name, which a later registration may change."""
    from ...library import BUILTIN, lookup
    impl = lookup(b.callee.name)
    cpu = impl.cpu
    if cpu is BUILTIN or impl.cpu_native is not None:
        return False
    if cpu is None:
        raise impl.missing("llvm", "cpu")
    return True


@dataclass
class LibraryHostCall:
    """A ``call_library`` whose cpu implementation is a Python callable: its outputs are
    allocated like a segment's, then it runs between segments."""
    binding: Binding


class SegmentEmitter(KernelEmitter):
    """Emits ``int64_t seg(PyObject *buffers, PyObject *dims)``: ``buffers`` is a tuple of NumPy
    arrays and ``dims`` an int64 array; the data pointers are read from the array objects
    (``PyArrayObject.data``), which costs far less than fetching them in Python.  Each call
    loads its operands into an argument array and calls the kernel entry; gemms become
    (batched) CBLAS calls; other library calls call their native implementation with the
    ABI of :mod:`relaxjax.library`.  The segment returns 0, or stops at the first library
    call that fails and returns ``(k + 1) << 32 | status`` (``k``: the call's position in the
    segment), or at a gather index out of range (``INDEX_ERROR | (k + 1) << 32``)."""

    def __init__(self, seg: Segment, slot_of, dim_slot, kernel_syms, kernel_numbers=None,
                 optimize: bool = True, generated_products: bool = True, epilogues=None):
        self.seg, self.slot_of, self.dim_slot, self.kernel_syms = seg, slot_of, dim_slot, kernel_syms
        # id(product binding) -> the program after it that runs on its tiles (``epilogue``)
        self.epilogues = epilogues or {}
        self.optimize = optimize        # else LLVM leaves the segment as written (optnone)
        # whether products may call the generated code (engine.generated_products), else
        # every product is a BLAS call
        self.generated_products = generated_products
        # id(kernel) -> the numbers its family's code takes after the dims (tir.families)
        self.kernel_numbers = kernel_numbers or {}
        self.math_used, self.helpers_used = set(), set()
        self.locals = {}
        self.natives: dict = {}         # LLVM global (a pointer) -> the native library function it holds
        self.checked = False            # whether it checks gather indices (a status to read)

    def emit(self) -> str:
        fn = self.fn = _Fn()
        self.env = {}
        self.nonneg_vars = set(self.dim_slot) | {BATCH_COUNTER}    # dims and the batch counter
        self._nonneg_memo = {}
        p = fn.val("ptr", f"getelementptr i8, ptr %dims, i64 {ARRAY_DATA_OFFSET}")
        dims = fn.val("ptr", f"load ptr, ptr {p}")
        # the error record of kernels that check indices read from data: after the dims
        self.err = fn.val("ptr", f"getelementptr i64, ptr {dims}, i64 {len(self.dim_slot)}")
        for name, s in self.dim_slot.items():
            p = fn.val("ptr", f"getelementptr i64, ptr {dims}, i64 {s}")
            self.env[name] = fn.val("i64", f"load i64, ptr {p}")
        fused = set()                   # programs run as a product's epilogue
        for k, b in enumerate(self.seg.calls):
            if id(b) in fused:
                continue
            if b.kind == "tir":
                if b.callee.host_checks:
                    self._host_checks(b, k)
                self._call_tir(b, k)
            elif id(b) in self.epilogues:
                fused.add(id(self.epilogues[id(b)]))
                self._gemm_with_epilogue(b, self.epilogues[id(b)])
            elif b.callee.name in GEMMS:
                self._gemm(b)
            elif b.callee.name in SYRKS:
                self._syrk(b)
            else:
                self._native_call(b, k)
        fn.emit("ret i64 0")
        attrs = "" if self.optimize else f" {SEGMENT_OPTNONE}"
        return "\n".join([f"define i64 @{self.seg.name}(ptr %buffers, ptr %dims){attrs} {{\nentry:"] +
                         ["  " + a for a in fn.entry_allocas] + fn.lines + ["}"])

    def _slot(self, v) -> str:
        """The data address of buffer ``v``: buffers[k]->data."""
        fn = self.fn
        p = fn.val("ptr", f"getelementptr i8, ptr %buffers, i64 {TUPLE_ITEMS_OFFSET + 8 * self.slot_of[v]}")
        obj = fn.val("ptr", f"load ptr, ptr {p}")
        p = fn.val("ptr", f"getelementptr i8, ptr {obj}, i64 {ARRAY_DATA_OFFSET}")
        data = fn.val("ptr", f"load ptr, ptr {p}")
        return fn.val("i64", f"ptrtoint ptr {data} to i64")

    def _host_checks(self, b: Binding, k: int) -> None:
        """A call's ``host_checks`` made natively before it (gather indices read from data,
        each in [-n, n); reduced axes not empty): a failing one returns
        ``INDEX_ERROR | (k + 1) << 32`` and the runtime raises NumPy's error from the buffers."""
        fn = self.fn
        for kind, pos, size, axis in b.callee.host_checks:
            if kind == "nonempty":
                self._fail_if(fn.val("i1", f"icmp eq i64 {self._expr(from_sympy(size))}, 0"), k)
                continue
            v = b.args[pos]
            ity = llty(v.type.dtype)
            ext = "zext" if v.type.dtype.kind == "u" else "sext"
            total = Const(1, INDEX)
            for d in v.type.shape:
                total = total * from_sympy(d)
            count, n = self._expr(total), self._expr(from_sympy(size))
            lo = fn.val("i64", f"sub i64 0, {n}")
            data = fn.val("ptr", f"inttoptr i64 {self._slot(v)} to ptr")
            pre = fn.block
            head, body, bad, done = (fn.label(x) for x in ("ichk", "ichkb", "ichkbad", "ichkok"))
            nxt = fn.tmp()
            fn.emit(f"br label %{head}")
            fn.start_block(head)
            j = fn.val("i64", f"phi i64 [ 0, %{pre} ], [ {nxt}, %{body} ]")
            more = fn.val("i1", f"icmp slt i64 {j}, {count}")
            fn.emit(f"br i1 {more}, label %{body}, label %{done}")
            fn.start_block(body)
            p = fn.val("ptr", f"getelementptr {ity}, ptr {data}, i64 {j}")
            x = fn.val(ity, f"load {ity}, ptr {p}")
            x = x if ity == "i64" else fn.val("i64", f"{ext} {ity} {x} to i64")
            under = fn.val("i1", f"icmp slt i64 {x}, {lo}")
            over = fn.val("i1", f"icmp sge i64 {x}, {n}")
            out = fn.val("i1", f"or i1 {under}, {over}")
            fn.emit(f"{nxt} = add i64 {j}, 1")
            fn.emit(f"br i1 {out}, label %{bad}, label %{head}")
            fn.start_block(bad)
            fn.emit(f"ret i64 {INDEX_ERROR | (k + 1) << 32}")
            fn.start_block(done)
        self.checked = True

    def _gemm_with_epilogue(self, b: Binding, prog: Binding) -> None:
        """Product ``b`` with program ``prog`` run on each of its tiles by the generated
        product (``epilogue``), or after it where the product runs elsewhere (BLAS)."""
        fn = self.fn
        arr = self._kernel_args(prog)
        done = f"%epidone{fn.n}"
        fn.n += 1
        fn.entry_allocas.append(f"{done} = alloca i1")
        fn.emit(f"store i1 false, ptr {done}")
        self._gemm(b, epilogue=(f"@{self.kernel_syms[id(prog.callee)]}.tile", arr, done))
        run, skip = fn.label("epirun"), fn.label("episkip")
        fn.emit(f"br i1 {fn.val('i1', f'load i1, ptr {done}')}, label %{skip}, label %{run}")
        fn.start_block(run)
        fn.emit(f"call void @{self.kernel_syms[id(prog.callee)]}(ptr {arr})")
        fn.emit(f"br label %{skip}")
        fn.start_block(skip)

    def _kernel_args(self, b: Binding) -> str:
        """The argument array of kernel call ``b`` (its buffers' addresses, dims, numbers,
        and the error record where it checks indices), filled in."""
        fn, f = self.fn, b.callee
        checked = bool(data_index_checks(f))
        numbers = [str(v) for v in self.kernel_numbers.get(id(f), ())]
        n = len(f.params) + len(f.dim_vars) + len(numbers) + checked
        arr = f"%args{fn.n}"
        fn.n += 1
        fn.entry_allocas.append(f"{arr} = alloca [{max(n, 1)} x i64]")
        values = [self._slot(v) for v in list(b.args) + list(b.outvars)] + \
                 [self.env[d] for d in f.dim_vars] + numbers
        if checked:
            values.append(fn.val("i64", f"ptrtoint ptr {self.err} to i64"))
        for j, v in enumerate(values):
            p = fn.val("ptr", f"getelementptr i64, ptr {arr}, i64 {j}")
            fn.emit(f"store i64 {v}, ptr {p}")
        return arr

    def _call_tir(self, b: Binding, k: int) -> None:
        """Call the kernel's entry with its argument array; a kernel that checks indices
        read from data also gets the error record, read after the call (a failing check
        returns ``INDEX_ERROR | (k + 1) << 32``)."""
        fn, f = self.fn, b.callee
        checked = bool(data_index_checks(f))
        arr = self._kernel_args(b)
        fn.emit(f"call void @{self.kernel_syms[id(f)]}(ptr {arr})")
        if checked:
            self._fail_if(fn.val("i1", f"icmp ne i64 {fn.val('i64', f'load i64, ptr {self.err}')}, 0"), k)
            self.checked = True

    def _fail_if(self, cond: str, k: int) -> None:
        """Return ``INDEX_ERROR | (k + 1) << 32`` (call ``k``'s check failed) when ``cond``."""
        fn = self.fn
        bad, ok = fn.label("chkbad"), fn.label("chkok")
        fn.emit(f"br i1 {cond}, label %{bad}, label %{ok}")
        fn.start_block(bad)
        fn.emit(f"ret i64 {INDEX_ERROR | (k + 1) << 32}")
        fn.start_block(ok)

    def _native_call(self, b: Binding, k: int) -> None:
        """``status = f(data, shapes, ndims, nargs)`` (the library ABI); a nonzero status
        returns from the segment."""
        from ...library import lookup
        fn = self.fn
        impl = lookup(b.callee.name)
        sym = "rjlib." + "".join(c if c.isalnum() or c in "._" else "_" for c in impl.name) + \
            f".v{impl.version}"
        # called through a pointer the module holds, set when it loads (``natives``): the
        # code names no process address, so the module is stored and loaded like any other
        self.natives[sym] = impl.name
        self.helpers_used.add(f"@\"{sym}\" = global ptr null")
        values = list(b.args) + list(b.outvars)
        n = len(values)
        dims = [d for v in values for d in v.type.shape]
        data, shapes, ndims = f"%ldata{fn.n}", f"%lshape{fn.n}", f"%lndim{fn.n}"
        fn.n += 1
        fn.entry_allocas += [f"{data} = alloca [{max(n, 1)} x ptr]",
                             f"{shapes} = alloca [{max(len(dims), 1)} x i64]",
                             f"{ndims} = alloca [{max(n, 1)} x i64]"]
        for i, v in enumerate(values):
            p = fn.val("ptr", f"getelementptr ptr, ptr {data}, i64 {i}")
            fn.emit(f"store ptr {fn.val('ptr', f'inttoptr i64 {self._slot(v)} to ptr')}, ptr {p}")
            p = fn.val("ptr", f"getelementptr i64, ptr {ndims}, i64 {i}")
            fn.emit(f"store i64 {len(v.type.shape)}, ptr {p}")
        for i, d in enumerate(dims):
            p = fn.val("ptr", f"getelementptr i64, ptr {shapes}, i64 {i}")
            fn.emit(f"store i64 {self._expr(from_sympy(d))}, ptr {p}")
        callee = fn.val("ptr", f"load ptr, ptr @\"{sym}\"")
        st = fn.val("i32", f"call i32 {callee}(ptr {data}, ptr {shapes}, ptr {ndims}, i64 {n})")
        bad = fn.val("i1", f"icmp ne i32 {st}, 0")
        fail, ok = fn.label("libfail"), fn.label("libok")
        fn.emit(f"br i1 {bad}, label %{fail}, label %{ok}")
        fn.start_block(fail)
        code = fn.val("i64", f"zext i32 {st} to i64")
        fn.emit(f"ret i64 {fn.val('i64', f'or i64 {code}, {(k + 1) << 32}')}")
        fn.start_block(ok)

    def _blas_symbol(self, name: str) -> str:
        """The global holding BLAS function ``name``'s address, set at load time, so the
        code holds no process address (see runtime.py); the comment names the function (and
        so its integer width) in the module text, which keys the persistent cache."""
        _, (prefix, suffix) = target.openblas()
        sym = f"@rj_blas_{name}"
        self.helpers_used.add(f"{sym} = external global ptr  ; -> {prefix}{name}{suffix}")
        return sym

    def _syrk(self, b: Binding) -> None:
        """C = A @ A.T for a 2-D A (M, K) -- or A.T @ A for A (K, M) -- through CBLAS syrk,
        lower triangle; nothing for M == 0; for K == 0 syrk's beta = 0 scaling writes the
        zeros."""
        fn = self.fn
        a, out = b.args[0], b.outvars[0]
        ty = llty(out.type.dtype)
        f = fn.val("ptr", f"load ptr, ptr {self._blas_symbol(('s' if ty == 'float' else 'd') + 'syrk')}")
        trans = b.callee.name.endswith("_tn")
        M, K = (self._expr(from_sympy(d)) for d in (a.type.shape[::-1] if trans else a.type.shape))
        cols = K if not trans else M            # A's row length, its leading dimension
        pa, pc = (fn.val("ptr", f"inttoptr i64 {self._slot(v)} to ptr") for v in (a, out))
        lda = fn.val("i64", f"call i64 @llvm.smax.i64(i64 {cols}, i64 1)")
        ldc = fn.val("i64", f"call i64 @llvm.smax.i64(i64 {M}, i64 1)")
        self.helpers_used.add("declare i64 @llvm.smax.i64(i64, i64)")
        go = fn.val("i1", f"icmp sgt i64 {M}, 0")
        yes, no = fn.label("syrk"), fn.label("syrkskip")
        fn.emit(f"br i1 {go}, label %{yes}, label %{no}")
        fn.start_block(yes)
        # CblasRowMajor = 101, CblasLower = 122, CblasNoTrans = 111, CblasTrans = 112
        fn.emit(f"call void {f}(i32 101, i32 122, i32 {112 if trans else 111}, i64 {M}, i64 {K}, {ty} 1.0, "
                f"ptr {pa}, i64 {lda}, {ty} 0.0, ptr {pc}, i64 {ldc})")
        fn.emit(f"br label %{no}")
        fn.start_block(no)

    def _gemm(self, b: Binding, epilogue=None) -> None:
        """C = A @ B row-major through CBLAS, looping over (broadcast) batch dims; a
        ``_nt``/``_tn``/``_tt`` gemm's transposed operands are stored (..., N, K) / (..., K, M)."""
        fn = self.fn
        a, bm = b.args
        out = b.outvars[0]
        letter = _GEMM_LETTER[b.callee.name]
        form = b.callee.name[-2:] if b.callee.name[-3] == "_" else "nn"
        ta, tb = form[0] == "t", form[1] == "t"
        ty = llty(out.type.dtype)
        sym = self._blas_symbol(f"{letter}gemm")
        ash, bsh, osh = a.type.shape, bm.type.shape, out.type.shape
        if letter in "cz":              # packed: the matrices' shapes without the trailing 2
            ash, bsh, osh = ash[:-1], bsh[:-1], osh[:-1]
            # CBLAS's complex functions take alpha = 1 and beta = 0 by pointer
            part, ty = ty, f"[2 x {ty}]"
            one, zero = f"@rj_one_{part}", f"@rj_zero_{part}"
            self.helpers_used.add(f"{one} = private unnamed_addr constant {ty} [{part} 1.0, {part} 0.0]")
            self.helpers_used.add(f"{zero} = private unnamed_addr constant {ty} zeroinitializer")
            scalars = (f"ptr {one}", f"ptr {zero}")
        else:
            scalars = (f"{ty} 1.0", f"{ty} 0.0")
        # an operand passed as the source of a view (``views``: its transpose, the last axis
        # kept last; ``blas_calls.rows_view``) is read in place: its matrices' rows are
        # ``strides[-2]`` elements apart, consecutive products ``strides[k]`` apart along
        # each batch axis k; other operands and the output are row-major arrays
        views = b.params.get("views", (None, None)) + (None,)
        strides = [_viewed_strides(sh, perm) for sh, perm in zip((ash, bsh, osh), views)]
        ash, bsh, osh = (tuple(sh[p] for p in perm) if perm else sh for sh, perm in zip((ash, bsh, osh), views))
        M, K, N = (self._expr(from_sympy(d)) for d in (osh[-2], ash[-2] if ta else ash[-1], osh[-1]))
        nb = len(osh) - 2
        pa, pb, pc = (fn.val("ptr", f"inttoptr i64 {self._slot(v)} to ptr") for v in (a, bm, out))
        # leading dimensions: the stored rows' strides (at least 1, as CBLAS requires)
        lda, ldb, ldc = (fn.val("i64", f"call i64 @llvm.smax.i64(i64 {self._expr(st[-2])}, i64 1)")
                         for st in strides)
        self.helpers_used.add("declare i64 @llvm.smax.i64(i64, i64)")
        viewed = any(views)
        if nb and len(bsh) == 2 and not ta and tuple(ash[:-2]) == tuple(osh[:-2]) and not viewed:
            # (..., M, K) @ (K, N): the batch is more rows of one gemm (row-major, contiguous)
            rows = from_sympy(osh[-2])
            for d in osh[:nb]:
                rows = rows * from_sympy(d)
            M, nb = self._expr(rows), 0

        def call(pa, pb, pc, epilogue=None):
            self._gemm_call(sym, scalars, letter, ta, tb, M, N, K, pa, lda, pb, ldb, pc, ldc, epilogue,
                            generated=not viewed)
        if nb == 0:
            call(pa, pb, pc, epilogue)
            return
        total = Const(1, INDEX)
        for d in osh[:nb]:
            total = total * from_sympy(d)
        uniform = None if viewed else _batch_strides(osh, ash, bsh)
        skip = None
        if letter in "sd" and uniform is not None and self.generated_products and \
                gemm_rule.may_use_generated(letter, target.vector_bits(), *(
                    int(x) if x.lstrip("-").isdigit() else None for x in (M, N, K)), batched=True):
            # one call of the generated product over the whole batch, where the rule says
            count = self._expr(total)
            use = gemm_rule.use_generated(lambda instr: fn.val("i1", instr), letter, target.vector_bits(),
                                          M, N, K, batch=count)
            gen, loop, skip = fn.label("bgen"), fn.label("bloop"), fn.label("bdone")
            fn.emit(f"br i1 {use}, label %{gen}, label %{loop}")
            fn.start_block(gen)
            sa, sb, sc = (self._expr(x) for x in uniform)
            g = self._generated_product(letter, ta, tb, loop)
            fn.emit(f"call void {g}(i64 {count}, i64 {sa}, i64 {sb}, i64 {sc}, i64 {M}, i64 {N}, i64 {K}, "
                    f"ptr {pa}, i64 {lda}, ptr {pb}, i64 {ldb}, ptr {pc}, i64 {ldc}, ptr null, ptr null)")
            fn.emit(f"br label %{skip}")
            fn.start_block(loop)
        # batch loop: t over the output's batch elements; operands broadcast their batch dims
        t = tir.Var(BATCH_COUNTER)
        bidx, rest = [], t
        for d in reversed(osh[:nb]):
            bidx.append(rest % from_sympy(d))
            rest = rest // from_sympy(d)
        bidx.reverse()

        def offset(shape, st):
            lead = nb - (len(shape) - 2)
            off = Const(0, INDEX)
            for k in range(len(shape) - 2):
                if not (isinstance(shape[k], int) and shape[k] == 1):
                    off = off + bidx[lead + k] * st[k]
            return off
        # the loop is emitted by hand around the call (a call is not a TIR statement)
        pre = fn.block
        head, body, done = fn.label("gemm"), fn.label("gbody"), fn.label("gdone")
        ext = self._expr(total)
        fn.emit(f"br label %{head}")
        fn.start_block(head)
        i = f"%t.{fn.n}"
        fn.n += 1
        nxt = fn.tmp()
        latch = fn.label("glatch")
        fn.emit(f"{i} = phi i64 [ 0, %{pre} ], [ {nxt}, %{latch} ]")
        c = fn.val("i1", f"icmp slt i64 {i}, {ext}")
        fn.emit(f"br i1 {c}, label %{body}, label %{done}")
        fn.start_block(body)
        self.env[BATCH_COUNTER] = i
        ptrs = []
        for p, shape, st in zip((pa, pb, pc), (ash, bsh, osh), strides):
            off = self._expr(offset(shape, st))
            ptrs.append(fn.val("ptr", f"getelementptr inbounds {ty}, ptr {p}, i64 {off}"))
        call(*ptrs)
        fn.emit(f"br label %{latch}")
        fn.start_block(latch)
        fn.emit(f"{nxt} = add nsw i64 {i}, 1")
        fn.emit(f"br label %{head}")
        fn.start_block(done)
        del self.env[BATCH_COUNTER]
        if skip is not None:
            fn.emit(f"br label %{skip}")
            fn.start_block(skip)

    def _generated_product(self, letter: str, ta: bool, tb: bool, fallback: str) -> str:
        """The address of the generated product of this type and these transposes, read
        from its runtime global (``gemm.pointer_symbol``); null there (its first call in
        this process), the loader (``engine.rj_gemm_loader``, given its index in
        ``gemm.VARIANTS``) compiles or loads it first, and
        if that failed the code goes to ``fallback`` (BLAS)."""
        fn = self.fn
        variant = gemm.gemm_symbol(letter, ta, tb)
        ptr = "@" + gemm.pointer_symbol(variant)
        self.helpers_used.add(f"{ptr} = external global ptr")
        self.helpers_used.add("@rj_gemm_loader = external global ptr")
        first = fn.val("ptr", f"load ptr, ptr {ptr}")
        here = fn.block
        ready, load = fn.label("gready"), fn.label("gload")
        fn.emit(f"br i1 {fn.val('i1', f'icmp eq ptr {first}, null')}, label %{load}, label %{ready}")
        fn.start_block(load)
        loader = fn.val("ptr", "load ptr, ptr @rj_gemm_loader")
        fn.emit(f"call void {loader}(i32 {gemm.VARIANTS.index(variant)})")
        loaded = fn.val("ptr", f"load ptr, ptr {ptr}")
        fn.emit(f"br i1 {fn.val('i1', f'icmp eq ptr {loaded}, null')}, label %{fallback}, label %{ready}")
        fn.start_block(ready)
        return fn.val("ptr", f"phi ptr [ {first}, %{here} ], [ {loaded}, %{load} ]")

    def _gemm_call(self, sym, scalars, letter, ta, tb, M, N, K, pa, lda, pb, ldb, pc, ldc,
                   epilogue=None, generated: bool = True) -> None:
        """C = op(A) @ op(B) (op: transposed where ``ta``/``tb``, A and B stored transposed);
        a real product of the shapes where it is faster (``gemm_rule.use_generated``) runs the
        generated product; a product with one column (N == 1) or one row (M == 1) is a
        gemv, which OpenBLAS runs several times faster than a gemm of that shape.
        ``scalars``: alpha = 1 and beta = 0 as the call's operands; ``generated``: False
        for operands read through views (BLAS alone)."""
        # CblasRowMajor = 101, CblasNoTrans = 111, CblasTrans = 112
        fn = self.fn
        alpha, beta = scalars
        nz = fn.val("i64", f"mul i64 {M}, {N}")
        go = fn.val("i1", f"icmp sgt i64 {nz}, 0")
        yes, no = fn.label("gcall"), fn.label("gskip")
        fn.emit(f"br i1 {go}, label %{yes}, label %{no}")
        fn.start_block(yes)
        bits = target.vector_bits()
        known = [int(x) if x.lstrip("-").isdigit() else None for x in (M, N, K)]
        nt = tb and not ta
        if letter in "sd" and generated and self.generated_products and \
                gemm_rule.may_use_generated(letter, bits, *known, nt=nt):
            gen, lib = fn.label("gen"), fn.label("blas")
            use = gemm_rule.use_generated(lambda instr: fn.val("i1", instr), letter, bits, M, N, K, nt=nt)
            fn.emit(f"br i1 {use}, label %{gen}, label %{lib}")
            fn.start_block(gen)
            g = self._generated_product(letter, ta, tb, lib)
            epi = "ptr null, ptr null"
            if epilogue is not None:        # (tile function, its argument array, the flag)
                epi = f"ptr {epilogue[0]}, ptr {epilogue[1]}"
                fn.emit(f"store i1 true, ptr {epilogue[2]}")
            fn.emit(f"call void {g}(i64 1, i64 0, i64 0, i64 0, i64 {M}, i64 {N}, i64 {K}, ptr {pa}, "
                    f"i64 {lda}, ptr {pb}, i64 {ldb}, ptr {pc}, i64 {ldc}, {epi})")
            fn.emit(f"br label %{no}")
            fn.start_block(lib)
        gemv = f"{sym[:-2]}mv"           # @rj_blas_sgemm -> @rj_blas_sgemv
        _, (prefix, suffix) = target.openblas()
        self.helpers_used.add(f"{gemv} = external global ptr  ; -> {prefix}{gemv[9:]}{suffix}")
        col = fn.val("i1", f"icmp eq i64 {N}, 1")
        row = fn.val("i1", f"icmp eq i64 {M}, 1")
        deep = fn.val("i1", f"icmp sgt i64 {K}, 0")     # gemv leaves y unwritten when K == 0
        vec = fn.val("i1", f"or i1 {col}, {row}")
        vec = fn.val("i1", f"and i1 {vec}, {deep}")
        mv, mm = fn.label("gemv"), fn.label("gemm")
        fn.emit(f"br i1 {vec}, label %{mv}, label %{mm}")
        fn.start_block(mv)
        g = fn.val("ptr", f"load ptr, ptr {gemv}")
        cv, rv = fn.label("gemvcol"), fn.label("gemvrow")
        fn.emit(f"br i1 {col}, label %{cv}, label %{rv}")
        # a vector operand (one column of B, one row of A) is its stored rows' first
        # elements (ld apart: 1 for an array, more for a view) or one stored row; the matrix
        # is read as stored: (M, K), or (K, M) transposed
        fn.start_block(cv)                 # c[M] = op(A)[M, K] @ b[K]
        rows, cols = (K, M) if ta else (M, K)
        fn.emit(f"call void {g}(i32 101, i32 {112 if ta else 111}, i64 {rows}, i64 {cols}, {alpha}, "
                f"ptr {pa}, i64 {lda}, ptr {pb}, i64 {1 if tb else ldb}, {beta}, ptr {pc}, i64 1)")
        fn.emit(f"br label %{no}")
        fn.start_block(rv)                 # c[N] = a[K] @ op(B)[K, N] = op(B)^T a
        rows, cols = (N, K) if tb else (K, N)
        fn.emit(f"call void {g}(i32 101, i32 {111 if tb else 112}, i64 {rows}, i64 {cols}, {alpha}, "
                f"ptr {pb}, i64 {ldb}, ptr {pa}, i64 {lda if ta else 1}, {beta}, ptr {pc}, i64 1)")
        fn.emit(f"br label %{no}")
        fn.start_block(mm)
        f = fn.val("ptr", f"load ptr, ptr {sym}")
        fn.emit(f"call void {f}(i32 101, i32 {112 if ta else 111}, i32 {112 if tb else 111}, i64 {M}, "
                f"i64 {N}, i64 {K}, {alpha}, ptr {pa}, i64 {lda}, ptr {pb}, i64 {ldb}, {beta}, "
                f"ptr {pc}, i64 {ldc})")
        fn.emit(f"br label %{no}")
        fn.start_block(no)
