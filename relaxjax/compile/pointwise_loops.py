"""PointwiseLoops: a ``fori_loop`` whose body updates each point of its carries from that
point alone runs as one loop-level program that takes a tile of points through every step
while the tile sits in cache.

Mandelbrot's escape iteration (``z = where(alive, z * z + c, z)``, ...), an explicit
per-point ODE step or a masked Newton iteration are loops of this kind.  Run as written,
every step streams every carry through memory once (a body program per step), so the loop
is memory bound however little it computes.  Here the steps run innermost but one: for each
tile of points (``TILE_BYTES`` of carries and inputs), the carries are copied to the
outputs, then every step updates the tile in place in a vectorized loop over its points.
Each point goes through the same operations in the same order as before: the results are
bit-identical.

The body qualifies when
* its carries share leading axes (the *points*: the carry of lowest rank gives them) and
  have a few trailing elements of constant count per point (the re/im pair of a split
  complex value);
* every binding is an injective primitive with a compute rule (elementwise ops, broadcasts,
  slices, reshapes, concatenates, ...), so FuseTIR's builder writes each new carry element as
  one expression;
* that expression reads each carry only at its own point (any trailing element of it); the
  loop's other operands are read-only and may be read anywhere.

Only the LLVM backend asks for this pass (``default_pipeline(pointwise_loops=True)``).
"""
from __future__ import annotations

import itertools

import numpy as np

from .. import tir
from ..ir import Binding, Function, Literal, regions
from ..shapes import ShapeEnv, is_symbolic
from ..tir import Buffer, Const, For, Load, Local, PrimFunc, Seq, Store, from_sympy, op
from ..tir.share import bind_shared
from .fuse import GATHERS, INJECTIVE_KINDS
from .fuse_tir import FusionError, _Builder
from .lowering import scalar_literal_expr
from .passes import Pass, new_name, rewrite_functions

TILE_BYTES = 16 * 1024        # a tile's carries and inputs: half of a typical L1 data cache
MIN_TILE, MAX_TILE = 32, 2048
MAX_ELEMENTS = 16             # trailing elements of one carry per point


class _NotPointwise(Exception):
    pass


def _point_axes(env: ShapeEnv, shapes: list) -> tuple:
    """The points' shape (the lowest-rank carry's) and each carry's trailing element shape."""
    points = min(shapes, key=len)
    if not points:
        raise _NotPointwise("a carry is a scalar")
    trailing = []
    for s in shapes:
        if not env.same_shape(s[:len(points)], points):
            raise _NotPointwise("the carries do not share their leading axes")
        rest = s[len(points):]
        if any(is_symbolic(d) for d in rest) or int(np.prod(rest, dtype=np.int64)) > MAX_ELEMENTS:
            raise _NotPointwise("a carry has many elements per point")
        trailing.append(tuple(int(d) for d in rest))
    return tuple(points), trailing


def _check_body(body: Function) -> None:
    for b in body.bindings:
        if b.kind != "primitive" or regions(b) or len(b.outvars) != 1 or \
                getattr(b.callee, "kind", None) not in INJECTIVE_KINDS or \
                b.callee.name in GATHERS:
            raise _NotPointwise(f"{b.callee.name} is not a pointwise primitive")
    if any(isinstance(r, Literal) for r in body.results):
        raise _NotPointwise("a carry's new value is a constant")


def _tile(elem_bytes: int) -> int:
    t = MIN_TILE
    while t * 2 <= MAX_TILE and t * 2 * elem_bytes <= TILE_BYTES:
        t *= 2
    return t


def tiled_program(b: Binding, name: str) -> tuple[PrimFunc, list] | None:
    """The program running ``fori_loop`` binding ``b`` tile by tile, with the graph values it
    is called with, or None when its body is not pointwise."""
    try:
        return _Tiler(b, name).program()
    except (_NotPointwise, FusionError, tir.TIRError):
        return None


class _Tiler:
    """One pointwise ``fori_loop`` as a program: the step's expressions per carry element
    (``step``), the program's buffers (``operands``), the tiled loops (``loops``)."""

    def __init__(self, b: Binding, name: str):
        self.b, self.name = b, name
        self.body: Function = b.params["body"].main
        self.n = b.params["n_carry"]
        _check_body(self.body)
        ps = self.body.params
        self.index_param, self.carry_params = ps[0], ps[1:1 + self.n]
        env = ShapeEnv("explicit", self.body.bounds)
        self.points, trailing = _point_axes(env, [p.type.shape for p in self.carry_params])
        # each carry's elements per point, as trailing indices
        self.elements = [list(itertools.product(*(range(d) for d in tr))) for tr in trailing]
        self.builder = _Builder(name, self.body.bindings, list(ps), list(self.body.results),
                                self.body.bounds)
        self.taken = self.builder.taken
        self.pv = [tir.fresh(f"i{k}", self.taken) for k in range(len(self.points))]
        self.t = tir.fresh("t", self.taken)

    def program(self) -> tuple[PrimFunc, list]:
        exprs, state = self.step()
        params, call_args, lo, hi, inits, outs = self.operands()
        body = self.loops(exprs, state, lo, hi, inits, outs)
        all_params = params + outs
        consts = [a.value for bb in self.body.bindings for a in bb.args if isinstance(a, Literal)]
        f = PrimFunc(self.name, all_params, len(outs),
                     tir.dim_vars(all_params, [bb.params for bb in self.body.bindings], consts), body)
        tir.verify_primfunc(f)
        return f, call_args

    def cells(self):
        """(carry, element) pairs, in the order of the step's expressions."""
        return [(k, comp) for k, comps in enumerate(self.elements) for comp in comps]

    def at(self, k: int, comp: tuple) -> tuple:
        return tuple(self.pv) + tuple(Const(c, tir.INDEX) for c in comp)

    def step(self) -> tuple[list, dict]:
        """Every new carry element as one expression over locals holding the point's old
        carry elements (``state``), the step number a local too."""
        builder, results = self.builder, self.body.results
        exprs = [builder.value(results[k], list(self.at(k, comp))) for k, comp in self.cells()]
        if builder.host_checks:
            raise _NotPointwise("the body reads data-dependent indices")
        state = {(k, comp): tir.fresh(f"s{k}", self.taken, self.carry_params[k].type.dtype)
                 for k, comp in self.cells()}
        carry_of = {id(builder.buffer[p]): k for k, p in enumerate(self.carry_params)
                    if p in builder.buffer}
        index_buf = builder.buffer.get(self.index_param)
        itype = self.index_param.type.dtype
        step = self.t if itype == tir.INDEX else op("convert", self.t, dtype=itype)
        names = [v.name for v in self.pv]

        def own_point(e):
            if not isinstance(e, Load):
                return e
            if index_buf is not None and e.buffer is index_buf:
                return step
            k = carry_of.get(id(e.buffer))
            if k is None:
                return e                        # a read-only operand: read anywhere
            head, rest = e.index[:len(names)], e.index[len(names):]
            if [tir.expr_str(i) for i in head] != names or not all(isinstance(i, Const) for i in rest):
                raise _NotPointwise("a carry is read at another point")
            v = state.get((k, tuple(int(i.value) for i in rest)))
            if v is None:
                raise _NotPointwise("a carry is read outside its point")
            return v
        # one map over all expressions: the builder shares nodes between them
        return list(tir.visit.map_expr(tir.Op("tuple", tuple(exprs), tir.BOOL), own_point).args), state

    def operands(self) -> tuple:
        """Input buffers (trip bounds, initial carries, read-only operands and array
        constants) with the graph values they are called with; the trip bounds as
        expressions; the initial carries' and the outputs' buffers."""
        params, call_args, taken = [], [], self.taken

        def bound(a, nm):
            e = scalar_literal_expr(a)
            if e is not None:
                return e
            buf = Buffer(tir.fresh(nm, taken).name, (), a.type.dtype)
            params.append(buf)
            call_args.append(a)
            return op("convert", buf[()], dtype=tir.INDEX) if a.type.dtype != tir.INDEX else buf[()]
        lo, hi = bound(self.b.args[0], "lo"), bound(self.b.args[1], "hi")
        inits = []
        for k, a in enumerate(self.b.args[2:2 + self.n]):
            buf = Buffer(tir.fresh(f"init{k}", taken).name, tuple(a.type.shape), a.type.dtype)
            inits.append(buf)
            params.append(buf)
            call_args.append(a)
        outer = dict(zip(self.body.params[1:], self.b.args[2:]))   # (the index has none)
        for v in self.builder.call_inputs:
            if v in self.carry_params or v is self.index_param:
                continue
            params.append(self.builder.buffer[v])
            call_args.append(outer.get(v, v))
        outs = [Buffer(tir.fresh(f"out{k}", taken).name, tuple(p.type.shape), p.type.dtype)
                for k, p in enumerate(self.carry_params)]
        return params, call_args, lo, hi, inits, outs

    def tile_size(self, exprs: list) -> int:
        """Points per tile: the carries' bytes per point and each distinct read of an operand
        that moves with the point's last coordinate, within ``TILE_BYTES``."""
        last = self.pv[-1].name
        reads = {(id(x.buffer), tir.expr_str(x)): x.buffer.dtype.itemsize
                 for e in exprs for x in tir.visit.walk_expr(e)
                 if isinstance(x, Load) and any(isinstance(i, tir.Var) and i.name == last
                                                for y in x.index for i in tir.visit.walk_expr(y))}
        carries = sum(p.type.dtype.itemsize * len(c) for p, c in zip(self.carry_params, self.elements))
        return _tile(carries + sum(reads.values()))

    def loops(self, exprs, state, lo, hi, inits, outs) -> tir.Stmt:
        """A parallel loop over (row, tile of the last axis); in each, the tile's carries
        copied to the outputs, then every step updating them in place."""
        taken, pv, T = self.taken, self.pv, self.tile_size(exprs)
        ext = [from_sympy(d) for d in self.points]
        rows = Const(1, tir.INDEX)
        for e in ext[:-1]:
            rows = rows * e
        n_tiles = (ext[-1] + (T - 1)) // T
        r, j0 = tir.fresh("r", taken), tir.fresh("j0", taken)
        head = [Local(j0, (r % n_tiles) * T)]
        row = r // n_tiles
        for k in range(len(pv) - 2, -1, -1):     # the point's leading coordinates
            head.append(Local(pv[k], row % ext[k] if k else row))
            row = row // ext[k]
        j1 = op("min", j0 + T, ext[-1])
        cells = self.cells()
        copy = [Store(outs[k], self.at(k, c), Load(inits[k], self.at(k, c))) for k, c in cells]
        load = [Local(state[(k, c)], Load(outs[k], self.at(k, c))) for k, c in cells]
        new = [tir.fresh(f"n{k}", taken, self.carry_params[k].type.dtype) for k, _ in cells]
        compute = [Local(v, e) for v, e in zip(new, exprs)]
        store = [Store(outs[k], self.at(k, c), v) for (k, c), v in zip(cells, new)]
        inner = For(pv[-1], j1, "vectorized", Seq(load + compute + store), j0)
        tile = Seq(head + [For(pv[-1], j1, "vectorized", Seq(copy), j0),
                           For(self.t, hi, "serial", inner, lo)])
        return bind_shared(For(r, rows * n_tiles, "parallel", tile), taken)


def _tile_loops(fn: Function, programs: dict) -> Function:
    bindings, changed = [], False
    for b in fn.bindings:
        if b.kind == "primitive" and b.callee.name == "fori_loop":
            name = new_name(programs, "pointwise_loop")
            got = tiled_program(b, name)
            if got is not None:
                prog, args = got
                programs[name] = prog
                b = Binding(list(b.outvars), prog, args, {}, b.source)
                changed = True
        bindings.append(b)
    if not changed:
        return fn
    return Function(fn.name, fn.params, fn.param_names, bindings, fn.results, fn.bounds,
                    fn.guards, fn.attrs)


pointwise_loops = Pass("PointwiseLoops", lambda module: rewrite_functions(module, _tile_loops))
