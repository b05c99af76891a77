"""Native implementations of the ``linalg.*`` library functions: LAPACK called from code
generated here, with the library ABI of :mod:`relaxjax.library`.

Each function takes float64 stacks of matrices (..., m, n) and loops over them, calling
the LAPACK routines that SciPy exports (``scipy.linalg.cython_lapack``: Fortran ABI, 32-bit
ints, every argument by pointer).  LAPACK is column-major and relaxjax row-major: a
row-major matrix is its transpose in column-major order, which the functions use instead of
copying (``inv`` and ``det`` factor A^T; ``solve`` solves with A^T's LU and ``trans="T"``;
``cholesky`` asks for the upper factor of A^T, i.e. the lower factor of A; ``qr`` copies A
column-major, as NumPy does, for NumPy's reflectors).  The module is compiled once per
process (llvmlite, O3) on first use; the functions run without the GIL.
"""
from __future__ import annotations

import ctypes
import functools
import threading
from typing import Callable

import llvmlite.binding as llvm

from ...library import loader
from . import target
from .codegen import _Fn as codegen_Fn
from .engine import compile_llvm

LAPACK = {   # routine -> number of (pointer) arguments
    "dgetrf": 6, "dgetrs": 9, "dgetri": 7, "dpotrf": 5, "dgeqrf": 8, "dorgqr": 9,
    "zgetrf": 6, "zgetrs": 9, "zgetri": 7,
}
WORK_PER_ROW = 64       # workspace (doubles) per matrix row: room for LAPACK's blocked code
FAIL = 1                # status: the matrix is singular / not positive definite
BAD_ARGUMENT = 2        # status: LAPACK rejected an argument (a bug)


class _Fn(codegen_Fn):
    """A small builder for straight-line LLVM IR with counted loops (counters live in
    allocas; the optimiser promotes them to registers), on the kernel generator's SSA and
    label naming."""

    def __init__(self, name: str, int_bits: int):
        super().__init__()
        self.name = name
        self.lint_ty = f"i{int_bits}"             # LAPACK's integer: 32 (LP64) or 64 (ILP64)
        self.lint_bytes = str(int_bits // 8)
        self.allocas: list = []

    v = codegen_Fn.val

    def alloca(self, ty: str) -> str:
        t = self.tmp()
        self.allocas.append(f"  {t} = alloca {ty}")
        return t

    def to_lint(self, value: str) -> str:
        """``value`` (an i64) as LAPACK's integer."""
        t = self.lint_ty
        return value if t == "i64" else self.v(t, f"trunc i64 {value} to {t}")

    def lint(self, value: str) -> str:
        """A pointer to ``value`` (an i64) as LAPACK's integer: its ``int *``."""
        p = self.alloca(self.lint_ty)
        self.emit(f"store {self.lint_ty} {self.to_lint(value)}, ptr {p}")
        return p

    def char(self, c: str) -> str:
        p = self.alloca("i8")
        self.emit(f"store i8 {ord(c)}, ptr {p}")
        return p

    def loop(self, count: str, body, start: str = "0") -> None:
        ctr = self.alloca("i64")
        self.emit(f"store i64 {start}, ptr {ctr}")
        head, loop, done = self.label("head"), self.label("body"), self.label("done")
        self.emit(f"br label %{head}")
        self.start_block(head)
        i = self.v("i64", f"load i64, ptr {ctr}")
        c = self.v("i1", f"icmp slt i64 {i}, {count}")
        self.emit(f"br i1 {c}, label %{loop}, label %{done}")
        self.start_block(loop)
        body(i)
        self.emit(f"store i64 {self.v('i64', f'add i64 {i}, 1')}, ptr {ctr}")
        self.emit(f"br label %{head}")
        self.start_block(done)

    def shape(self, k) -> str:
        p = self.v("ptr", f"getelementptr i64, ptr %shapes, i64 {k}")
        return self.v("i64", f"load i64, ptr {p}")

    def ndim(self, k: int) -> str:
        p = self.v("ptr", f"getelementptr i64, ptr %ndims, i64 {k}")
        return self.v("i64", f"load i64, ptr {p}")

    def matrices(self, nargs_before: int = 0, trailing: int = 0):
        """For array ``nargs_before`` (whose dims start after the earlier arrays' dims):
        (batch size: the product of all but the last two dims, offset of its last two dims);
        ``trailing`` dims after the matrix's two (a complex value's packed pair) apart."""
        off = "0"
        for k in range(nargs_before):
            off = self.v("i64", f"add i64 {off}, {self.ndim(k)}")
        rank = self.ndim(nargs_before)
        nb = self.v("i64", f"sub i64 {rank}, {2 + trailing}")
        acc = self.alloca("i64")
        self.emit(f"store i64 1, ptr {acc}")

        def mul(i):
            d = self.shape(self.v("i64", f"add i64 {off}, {i}"))
            self.emit(f"store i64 {self.mul(self.v('i64', f'load i64, ptr {acc}'), d)}, ptr {acc}")
        self.loop(nb, mul)
        return self.v("i64", f"load i64, ptr {acc}"), self.v("i64", f"add i64 {off}, {nb}")

    def last2(self, nargs_before: int = 0, trailing: int = 0):
        """(batch size, rows, cols) of array ``nargs_before``."""
        B, off = self.matrices(nargs_before, trailing)
        return B, self.shape(off), self.shape(self.v("i64", f"add i64 {off}, 1"))

    def data(self, k: int) -> str:
        p = self.v("ptr", f"getelementptr ptr, ptr %data, i64 {k}")
        return self.v("ptr", f"load ptr, ptr {p}")

    def at(self, base: str, index: str, ty: str = "double") -> str:
        return self.v("ptr", f"getelementptr {ty}, ptr {base}, i64 {index}")

    def mul(self, *xs: str) -> str:
        out = xs[0]
        for x in xs[1:]:
            out = self.v("i64", f"mul i64 {out}, {x}")
        return out

    def max1(self, x: str) -> str:
        return self.v("i64", f"call i64 @llvm.smax.i64(i64 {x}, i64 1)")

    def malloc(self, nbytes: str) -> str:
        return self.v("ptr", f"call ptr @malloc(i64 {nbytes})")

    def memcpy(self, dst: str, src: str, ndoubles: str) -> None:
        n = self.v("i64", f"mul i64 {ndoubles}, 8")
        self.emit(f"call void @llvm.memcpy.p0.p0.i64(ptr {dst}, ptr {src}, i64 {n}, i1 false)")

    def lapack(self, routine: str, *args: str) -> None:
        assert len(args) == LAPACK[routine], routine
        self.emit(f"call void @{_symbol(routine, self.lint_ty)}({', '.join(f'ptr {a}' for a in args)})")

    def check_info(self, info: str, cleanup, fail_status: int = FAIL) -> None:
        """Return ``fail_status`` when info > 0 and BAD_ARGUMENT when info < 0."""
        t = self.lint_ty
        v = self.v(t, f"load {t}, ptr {info}")
        for cond, status in ((f"icmp sgt {t} {v}, 0", fail_status), (f"icmp slt {t} {v}, 0", BAD_ARGUMENT)):
            def fail(status=status):
                cleanup()
                self.emit(f"ret i32 {status}")
                self.start_block(self.label("dead"))
            self.if_(self.v("i1", cond), fail)

    def text(self) -> str:
        head = f"define i32 @{self.name}(ptr %data, ptr %shapes, ptr %ndims, i64 %nargs) {{\nentry:"
        return "\n".join([head] + self.allocas + self.lines + ["}"])


def _free(f: _Fn, *ptrs: str):
    def cleanup():
        for p in ptrs:
            f.emit(f"call void @free(ptr {p})")
    return cleanup


def _solve(int_bits: int, complex_: bool = False) -> str:
    """(a: (..., n, n), bt: (..., k, n)) -> xt: (..., k, n), ``xt = solve(a, bt.mT).mT``
    (the same batch dims).  ``complex_``: complex128 values packed as float64 pairs (a
    trailing dim of 2, complex128's own layout), solved by zgetrf/zgetrs."""
    w, p = (2, "z") if complex_ else (1, "d")
    f = _Fn("rj_linalg_zsolve" if complex_ else "rj_linalg_solve", int_bits)
    a, bt, xt = f.data(0), f.data(1), f.data(2)
    B, n, _ = f.last2(0, w - 1)
    _, k, _ = f.last2(1, w - 1)
    nn, kn = f.mul(n, n, str(w)), f.mul(k, n, str(w))          # doubles per matrix
    lu = f.malloc(f.mul(f.max1(nn), "8"))
    ipiv = f.malloc(f.mul(f.max1(n), f.lint_bytes))
    f.memcpy(xt, bt, f.mul(B, kn))
    pn, pk, ld, info, trans = f.lint(n), f.lint(k), f.lint(f.max1(n)), f.alloca(f.lint_ty), f.char("T")
    cleanup = _free(f, lu, ipiv)

    def body(i):
        f.memcpy(lu, f.at(a, f.mul(i, nn)), nn)
        f.lapack(p + "getrf", pn, pn, lu, ld, ipiv, info)
        f.check_info(info, cleanup)
        f.lapack(p + "getrs", trans, pn, pk, lu, ld, ipiv, f.at(xt, f.mul(i, kn)), ld, info)
        f.check_info(info, cleanup)
    f.loop(B, body)
    cleanup()
    f.emit("ret i32 0")
    return f.text()


def _inv(int_bits: int, complex_: bool = False) -> str:
    """a: (..., n, n) -> (..., n, n).  getrf + getri on A^T give (A^T)^-1 = (A^-1)^T, which
    read row-major is A^-1.  ``complex_``: packed complex128 (see ``_solve``)."""
    w, p = (2, "z") if complex_ else (1, "d")
    f = _Fn("rj_linalg_zinv" if complex_ else "rj_linalg_inv", int_bits)
    a, out = f.data(0), f.data(1)
    B, n, _ = f.last2(0, w - 1)
    nn = f.mul(n, n, str(w))
    f.memcpy(out, a, f.mul(B, nn))
    lwork = f.mul(f.max1(n), str(WORK_PER_ROW))
    ipiv = f.malloc(f.mul(f.max1(n), f.lint_bytes))
    work = f.malloc(f.mul(lwork, str(8 * w)))
    pn, ld, pl, info = f.lint(n), f.lint(f.max1(n)), f.lint(lwork), f.alloca(f.lint_ty)
    cleanup = _free(f, ipiv, work)

    def body(i):
        q = f.at(out, f.mul(i, nn))
        f.lapack(p + "getrf", pn, pn, q, ld, ipiv, info)
        f.check_info(info, cleanup)
        f.lapack(p + "getri", pn, q, ld, ipiv, work, pl, info)
        f.check_info(info, cleanup)
    f.loop(B, body)
    cleanup()
    f.emit("ret i32 0")
    return f.text()


def _det(int_bits: int) -> str:
    """a: (..., n, n) -> (...).  As NumPy: sign and log|det| from the LU factors of A^T
    (det A^T = det A), ``sign * exp(logdet)``; 0 for an exactly singular matrix."""
    f = _Fn("rj_linalg_det", int_bits)
    a, out = f.data(0), f.data(1)
    B, n, _ = f.last2(0)
    nn = f.mul(n, n)
    lu = f.malloc(f.mul(f.max1(nn), "8"))
    ipiv = f.malloc(f.mul(f.max1(n), f.lint_bytes))
    pn, ld, info = f.lint(n), f.lint(f.max1(n)), f.alloca(f.lint_ty)
    sign, logdet = f.alloca("double"), f.alloca("double")
    cleanup = _free(f, lu, ipiv)

    def body(i):
        f.memcpy(lu, f.at(a, f.mul(i, nn)), nn)
        f.lapack("dgetrf", pn, pn, lu, ld, ipiv, info)
        v = f.v(f.lint_ty, f"load {f.lint_ty}, ptr {info}")
        def bad():
            cleanup()
            f.emit(f"ret i32 {BAD_ARGUMENT}")
            f.start_block(f.label("dead"))
        f.if_(f.v("i1", f"icmp slt {f.lint_ty} {v}, 0"), bad)
        f.emit(f"store double 1.0, ptr {sign}")
        f.emit(f"store double 0.0, ptr {logdet}")

        def pivot(j):
            diag = f.mul(j, f.v("i64", f"add i64 {n}, 1"))
            u = f.v("double", f"load double, ptr {f.at(lu, diag)}")
            p = f.v(f.lint_ty, f"load {f.lint_ty}, ptr {f.at(ipiv, j, f.lint_ty)}")
            j1 = f.to_lint(f.v("i64", f"add i64 {j}, 1"))
            swapped = f.v("i1", f"icmp ne {f.lint_ty} {p}, {j1}")
            neg = f.v("i1", f"fcmp olt double {u}, 0.0")
            flip = f.v("i1", f"xor i1 {swapped}, {neg}")
            s = f.v("double", f"load double, ptr {sign}")
            ms = f.v("double", f"fneg double {s}")
            f.emit(f"store double {f.v('double', f'select i1 {flip}, double {ms}, double {s}')}, ptr {sign}")
            au = f.v("double", f"call double @llvm.fabs.f64(double {u})")
            lg = f.v("double", f"call double @llvm.log.f64(double {au})")
            acc = f.v("double", f"load double, ptr {logdet}")
            f.emit(f"store double {f.v('double', f'fadd double {acc}, {lg}')}, ptr {logdet}")
        f.loop(n, pivot)
        ld_ = f.v("double", f"load double, ptr {logdet}")
        e = f.v("double", f"call double @llvm.exp.f64(double {ld_})")
        d = f.v("double", f"fmul double {f.v('double', f'load double, ptr {sign}')}, {e}")
        singular = f.v("i1", f"icmp sgt {f.lint_ty} {v}, 0")
        res = f.v("double", f"select i1 {singular}, double 0.0, double {d}")
        f.emit(f"store double {res}, ptr {f.at(out, i)}")
    f.loop(B, body)
    cleanup()
    f.emit("ret i32 0")
    return f.text()


def _cholesky(int_bits: int) -> str:
    """a: (..., n, n) -> L: (..., n, n).  potrf("U") on A^T reads A's lower triangle and
    leaves U = L^T in column-major order, i.e. L row-major; the other triangle is zeroed."""
    f = _Fn("rj_linalg_cholesky", int_bits)
    a, out = f.data(0), f.data(1)
    B, n, _ = f.last2(0)
    nn = f.mul(n, n)
    f.memcpy(out, a, f.mul(B, nn))
    pn, ld, info, uplo = f.lint(n), f.lint(f.max1(n)), f.alloca(f.lint_ty), f.char("U")

    def body(i):
        p = f.at(out, f.mul(i, nn))
        f.lapack("dpotrf", uplo, pn, p, ld, info)
        f.check_info(info, lambda: None)

        def row(r):
            rowp = f.at(p, f.mul(r, n))
            f.loop(n, lambda c: f.emit(f"store double 0.0, ptr {f.at(rowp, c)}"),
                   start=f.v("i64", f"add i64 {r}, 1"))
        f.loop(n, row)
    f.loop(B, body)
    f.emit("ret i32 0")
    return f.text()


def _qr(int_bits: int) -> str:
    """a: (..., m, n) -> q: (..., m, k), r: (..., k, n), k = min(m, n) (reduced QR), as
    NumPy computes it: ``dgeqrf`` and ``dorgqr`` on A copied column-major (an LQ of the
    row-major A^T, which needs no copy, is the same factorization in exact arithmetic, but a
    reflector whose leading element is zero up to rounding then took the other sign)."""
    f = _Fn("rj_linalg_qr", int_bits)
    a, q, r = f.data(0), f.data(1), f.data(2)
    B, m, n = f.last2(0)
    k = f.v("i64", f"call i64 @llvm.smin.i64(i64 {m}, i64 {n})")
    mn, mk, kn = f.mul(m, n), f.mul(m, k), f.mul(k, n)
    w = f.malloc(f.mul(f.max1(mn), "8"))
    tau = f.malloc(f.mul(f.max1(k), "8"))
    lwork = f.mul(f.max1(f.v("i64", f"call i64 @llvm.smax.i64(i64 {m}, i64 {n})")), str(WORK_PER_ROW))
    work = f.malloc(f.mul(lwork, "8"))
    pm, pn, pk = f.lint(m), f.lint(n), f.lint(k)
    ldm, pl, info = f.lint(f.max1(m)), f.lint(lwork), f.alloca(f.lint_ty)
    cleanup = _free(f, w, tau, work)

    def body(i):
        ab, rb, qb = f.at(a, f.mul(i, mn)), f.at(r, f.mul(i, kn)), f.at(q, f.mul(i, mk))

        def copy(rows: str, cols: str, src: str, src_at, dst: str, dst_at, keep=None):
            def row(ii):
                def elem(j):
                    x = f.v("double", f"load double, ptr {f.at(src, src_at(ii, j))}")
                    if keep is not None:
                        x = f.v("double", f"select i1 {keep(ii, j)}, double {x}, double 0.0")
                    f.emit(f"store double {x}, ptr {f.at(dst, dst_at(ii, j))}")
                f.loop(cols, elem)
            f.loop(rows, row)

        def cm(ii, j):          # element (ii, j) of a column-major matrix of m rows
            return f.v("i64", f"add i64 {f.mul(j, m)}, {ii}")

        def rm(width):          # element (ii, j) of a row-major matrix ``width`` wide
            return lambda ii, j: f.v("i64", f"add i64 {f.mul(ii, width)}, {j}")
        copy(m, n, ab, rm(n), w, cm)
        f.lapack("dgeqrf", pm, pn, w, ldm, tau, work, pl, info)
        f.check_info(info, cleanup)
        copy(k, n, w, cm, rb, rm(n), keep=lambda ii, j: f.v("i1", f"icmp sle i64 {ii}, {j}"))
        f.lapack("dorgqr", pm, pk, pk, w, ldm, tau, work, pl, info)
        f.check_info(info, cleanup)
        copy(m, k, w, cm, qb, rm(k))
    f.loop(B, body)
    cleanup()
    f.emit("ret i32 0")
    return f.text()


FUNCTIONS = {"solve": _solve, "inv": _inv, "det": _det, "cholesky": _cholesky, "qr": _qr,
             "zsolve": lambda bits: _solve(bits, True), "zinv": lambda bits: _inv(bits, True)}


def _scipy_routine(routine: str) -> int:
    """The address of SciPy's LAPACK ``routine`` (``scipy.linalg.cython_lapack``, LP64)."""
    from scipy.linalg import cython_lapack
    cap = cython_lapack.__pyx_capi__[routine]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
    get_ptr.restype, get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get_ptr(cap, get_name(cap))


@functools.lru_cache(maxsize=None)
def lapack_source() -> tuple[int, Callable[[str], int]]:
    """(integer bits, routine -> address): the LAPACK in NumPy's OpenBLAS when it exports
    one (ILP64: already loaded, where importing SciPy's costs a third of a second), else
    SciPy's."""
    found = target.lapack_function("dgetrf")
    if found is not None:
        return found[1], lambda r: target.lapack_function(r)[0]
    return 32, _scipy_routine


def module_text(name: str, int_bits: int) -> str:
    """The LLVM module of native ``linalg.<name>`` for a LAPACK with ``int_bits`` integers."""
    decls = [f"declare void @{_symbol(r, f'i{int_bits}')}({', '.join(['ptr'] * n)})" for r, n in LAPACK.items()]
    decls += ["declare ptr @malloc(i64)", "declare void @free(ptr)",
              "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)",
              "declare i64 @llvm.smax.i64(i64, i64)", "declare i64 @llvm.smin.i64(i64, i64)",
              "declare double @llvm.log.f64(double)",
              "declare double @llvm.exp.f64(double)", "declare double @llvm.fabs.f64(double)"]
    return "\n".join(decls) + "\n\n" + FUNCTIONS[name](int_bits) + "\n"


_LOCK = threading.Lock()


def _symbol(routine: str, lint_ty: str) -> str:
    """The symbol generated code calls ``routine`` by: one per integer width, so a module
    for the other LAPACK (a test's) never rebinds this process's."""
    return f"rj_lapack_{lint_ty}_{routine}"


def build(name: str, int_bits: int, routine: Callable[[str], int]):
    """``(module, address)`` of ``linalg.<name>`` compiled (in memory: it calls LAPACK at
    this process's addresses) against a LAPACK with ``int_bits`` integers whose routines
    are at ``routine(r)``; the address is valid while the module is alive."""
    target.init()
    with _LOCK:
        for r in LAPACK:
            llvm.add_symbol(_symbol(r, f"i{int_bits}"), routine(r))
    cm = compile_llvm(module_text(name, int_bits), [])
    return cm, cm.engine.get_function_address(f"rj_linalg_{name}")


@functools.lru_cache(maxsize=None)
def _compiled(name: str):
    """``linalg.<name>`` for this process's LAPACK, each function on its first use only (kept
    for the process: library loaders hold its address)."""
    return build(name, *lapack_source())


def address(name: str) -> int:
    """The address of native ``linalg.<name>`` (compiled on first use)."""
    return _compiled(name)[1]


def _loader(name):
    return loader(lambda: address(name))


solve, inv, det, cholesky, qr, zsolve, zinv = (
    _loader(n) for n in ("solve", "inv", "det", "cholesky", "qr", "zsolve", "zinv"))
