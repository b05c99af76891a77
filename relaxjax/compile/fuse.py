"""FuseOps: group producer-consumer bindings into fused sub-functions.

Every binding gets an *op pattern* (``op_pattern``): injective (elementwise, broadcast and
index-mapping ops), reduction, output-fusable (a matmul whose elementwise epilogue can follow
it) or opaque.  Loop-level programs (``call_tir``) get theirs by analysing their loops
(``compile.analysis``), so user-written programs fuse by the same rule as generated ones.

Groups grow in binding order; a binding joins the group of one of its producers when

* both are injective and they cover the same number of elements (proved symbolically, so
  the group is one loop nest whatever ``n`` is at run time);
* it is a reduction whose input has the element count of an injective group (the producers
  are inlined into the accumulator loop), or a second reduction over the same input shape
  and axes as the group's (softmax's max and sum; layer norm's mean and variance);
* it is injective over the reduction group's full shape or over its reduced shape (the
  epilogue: ``x - max``, ``e / sum``, ``(x - mu) * rsqrt(var) * g + b``);
* it is injective over a matmul's output (bias + activation after a library gemm);

and joining creates no cycle between groups.  Each group of two or more bindings becomes a
graph ``Function`` with ``attrs["primitive"] = True`` called from its caller; ``Legalize``
turns it into one loop-level program (``fuse_tir``), or a library call plus one program
for a matmul group.  A group the loop builder cannot express is left unfused.
"""
from __future__ import annotations


from ..ir import Binding, Function, IRModule, Var
from ..shapes import ShapeEnv, prod
from ..tir.analysis import classify_primfunc
from .fuse_tir import FusionError, fused_primfunc
from .blas_calls import SYRK, swaps_last_two_axes
from .lowering import BLAS
from .passes import Pass
from .value_ranges import ValueRanges

INJECTIVE_KINDS = {"elementwise", "broadcast", "injective"}
# library calls an elementwise epilogue can follow: the real gemms and syrks
OUTPUT_FUSABLE_LIBRARY = set(BLAS.values()) | set(SYRK.values())
FUSABLE_REDUCTIONS = {"reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_and",
                      "reduce_or"}


def op_pattern(b: Binding) -> str:
    """"injective", "reduction", "output_fusable" or "opaque"."""
    if b.kind == "function":
        return "opaque"
    if b.kind == "library":
        # (a complex gemm's packed output has no real epilogue to take: its readers split it)
        return "output_fusable" if b.callee.name in OUTPUT_FUSABLE_LIBRARY else "opaque"
    if b.kind == "tir":
        return "injective" if classify_primfunc(b.callee) in ("elementwise", "injective") else "opaque"
    kind = getattr(b.callee, "kind", "opaque")
    if kind == "data_dependent" or b.callee.name == "match_cast" or len(b.outvars) != 1:
        return "opaque"
    if kind in INJECTIVE_KINDS:
        return "injective"
    if kind == "reduction":
        return "reduction" if b.callee.name in FUSABLE_REDUCTIONS else "opaque"
    if kind == "output_fusable":
        return "output_fusable" if b.outvars[0].type.dtype.kind == "f" else "opaque"
    return "opaque"


# Layout ops that read each element of an operand at most once: a producer of another
# element count is inlined into them without recomputing anything (a broadcast would
# recompute its operand for every copy).
READ_ONCE = {"concatenate", "pad", "slice", "update_slice", "dynamic_update_slice", "transpose",
             "reshape"}
# The longest chain of bindings one fused program computes: its expression is built (and
# emitted) recursively, one level per binding, so a longer chain (a 300-op elementwise
# chain) would exhaust Python's recursion limit; it splits into programs of at most this
# many levels, with one stored intermediate between them.
MAX_FUSED_DEPTH = 64
GATHERS = ("take", "take_along_axis")


class _Group:
    def __init__(self, gid: int, kind: str, first: int):
        self.id = gid
        self.kind = kind              # injective | reduction | output_fusable | opaque
        self.members: list[int] = [first]
        self.deps: set[int] = set()   # groups this one reads values of
        self.count = None             # injective / output_fusable: elements of every value
        self.full = None              # reduction: the reduced input shape, axes, kept count
        self.axes = None
        self.kept = None
        # inlined into a layout consumer of another count: not inlined into a second one,
        # where a chain (an update of an update, each reading its input at two places) would
        # grow its expression exponentially
        self.reshaped = False
        self.depth = 0                # the longest chain of members (see MAX_FUSED_DEPTH)


class _Fuser:
    def __init__(self, fn: Function):
        self.fn = fn
        self.env = ShapeEnv("explicit", fn.bounds)
        self.ranges = ValueRanges(fn.bindings, self.env)
        self.groups: list[_Group] = []
        self.group_of: dict = {}      # Var -> group id
        self.uses = fn.uses()
        self.depth: dict = {}         # Var -> its chain length within its group

    def index_inside(self, b: Binding, gids: set) -> bool:
        """Whether ``b`` is a gather whose indices groups ``gids`` compute and which may be
        out of range: a fused program range-checks the indices it reads as an input buffer,
        not ones it computes, so such a gather cannot join them (it starts a group of its
        own, the rest still fuses).  Indices in range by construction (``value_ranges``)
        need no check."""
        return b.kind == "primitive" and b.callee.name in GATHERS and \
            isinstance(b.args[1], Var) and self.group_of.get(b.args[1]) in gids and \
            not self.ranges.within(b.args[1], b.args[0].type.shape[b.params["axis"]])

    def chain(self, g: _Group, b: Binding) -> int:
        """The chain length of ``b`` computed in group ``g``."""
        return 1 + max((self.depth.get(a, 0) for a in b.args
                        if isinstance(a, Var) and self.group_of.get(a) == g.id), default=0)

    def equal(self, a, b) -> bool:
        return self.env.try_prove("==", a, b) is True

    def reaches(self, src: int, dst: int) -> bool:
        """Does group ``dst`` depend (transitively) on group ``src``?"""
        todo, seen = [dst], set()
        while todo:
            g = todo.pop()
            if g == src:
                return True
            if g not in seen:
                seen.add(g)
                todo.extend(self.groups[g].deps)
        return False

    def feeds_only(self, g: _Group, index: int) -> bool:
        """Whether binding ``index`` is the only reader outside ``g`` of ``g``'s values (none
        is a result): then ``g`` can be inlined into it whatever its element count, since a
        fused loop nest stores only the consumer's values (a stencil into its ``pad``,
        ``concatenate`` or slice update)."""
        members = set(g.members)
        for m in members:
            for v in self.fn.bindings[m].outvars:
                if any(u not in members and u != index for u in self.uses.get(v, [])):
                    return False
        return True

    def fits(self, g: _Group, b: Binding, pattern: str, index: int = -1) -> bool:
        out = b.outvars[0].type.shape
        if g.kind == "output_fusable" and g.full is not None:
            return self.fits_rows(g, b, pattern)       # a row-wise epilogue after the gemm
        if pattern == "reduction" and g.kind == "output_fusable":
            x = b.args[0].type.shape
            return self.equal(prod(x), g.count) and not self.equal(prod(x), prod(out))
        if pattern == "injective":
            if g.kind == "injective" and not self.equal(prod(out), g.count):
                return b.callee.name in READ_ONCE and not g.reshaped and self.feeds_only(g, index)
            if g.kind in ("injective", "output_fusable"):
                return self.equal(prod(out), g.count)
            if g.kind == "reduction":
                return self.equal(prod(out), prod(g.full)) or self.equal(prod(out), g.kept)
            return False
        if pattern == "reduction":
            x = b.args[0].type.shape
            axes = tuple(sorted(b.params["axes"]))
            if self.equal(prod(x), prod(out)):      # reduces nothing but size-1 axes
                return False
            if g.kind == "injective":
                return self.equal(prod(x), g.count)
            if g.kind == "reduction":
                return axes == g.axes and self.env.same_shape(x, g.full)
        return False

    def fits_rows(self, g: _Group, b: Binding, pattern: str) -> bool:
        out = b.outvars[0].type.shape
        if pattern == "injective":
            return self.equal(prod(out), prod(g.full)) or self.equal(prod(out), g.kept)
        x = b.args[0].type.shape
        return pattern == "reduction" and tuple(sorted(b.params["axes"])) == g.axes and \
            self.env.same_shape(x, g.full)

    def join(self, g: _Group, b: Binding, pattern: str, index: int) -> None:
        g.members.append(index)
        if pattern == "injective" and g.kind == "injective":
            count = prod(b.outvars[0].type.shape)       # the consumer's values are stored
            g.reshaped = g.reshaped or not self.equal(count, g.count)
            g.count = count
        if pattern == "reduction" and g.kind in ("injective", "output_fusable") and g.full is None:
            if g.kind == "injective":
                g.kind = "reduction"
            g.full = tuple(b.args[0].type.shape)
            g.axes = tuple(sorted(b.params["axes"]))
            g.kept = prod(b.outvars[0].type.shape)

    def constant(self, h: _Group, user: int) -> bool:
        """A one-element injective group that reads no array (``convert(m * n)`` of a mean)
        and whose value only binding ``user`` reads: its consumer's group computes it."""
        if h.kind != "injective" or h.deps or len(h.members) != 1:
            return False
        b = self.fn.bindings[h.members[0]]
        return _dim_scalar(b, lambda n: self.equal(n, 1)) and self.uses.get(b.outvars[0]) == [user]

    def mergeable(self, g: _Group, h: _Group) -> bool:
        """Two reduction groups over the same rows, with no path between them through a
        third group: one row-wise kernel can compute both (layer norm's mean and var)."""
        if g.kind != "reduction" or h.kind != "reduction" or g.axes != h.axes or \
                not self.env.same_shape(g.full, h.full):
            return False
        return not any(self.reaches(h.id, d) for d in g.deps if d != h.id) and \
            not any(self.reaches(g.id, d) for d in h.deps if d != g.id)

    def siblings(self, g: _Group, h: _Group, index: int) -> bool:
        """An injective group ``h`` feeding ``g``'s newest member (binding ``index``), of
        the same element count or read by nothing else, with no path between them through
        a third group: one loop computes both.  ``g`` may be a matmul's elementwise
        epilogue (``h @ w + take(x, i)``: the gather is read where the epilogue reads it,
        not stored first); ``h`` then feeds the epilogue, never the product."""
        if g.kind == "output_fusable" and g.full is None and h.kind == "injective" and \
                g.count is not None and h.count is not None:
            return self.equal(g.count, h.count) and \
                not any(self.reaches(h.id, d) for d in g.deps) and \
                not any(self.reaches(g.id, d) for d in h.deps)
        if g.kind != "injective" or h.kind != "injective" or g.count is None or h.count is None:
            return False
        if not self.equal(g.count, h.count) and not (
                self.fn.bindings[index].callee.name in READ_ONCE and not h.reshaped and
                self.feeds_only(h, index)):
            return False
        # neither may read the other's values except through the consumer itself: inlined,
        # a value is recomputed at every place it is read (a chain of updates, each reading
        # its input at two places, would double its expression per step)
        return not any(self.reaches(h.id, d) for d in g.deps) and \
            not any(self.reaches(g.id, d) for d in h.deps)

    def merge(self, g: _Group, h: _Group) -> None:
        if g.kind == "output_fusable":   # the product stays the first member (FuseTIR's epilogue)
            g.members = g.members[:1] + sorted(g.members[1:] + h.members)
        else:
            g.members = sorted(g.members + h.members)
        g.depth += h.depth            # (a bound: h's chains may feed g's)
        g.deps = (g.deps | h.deps) - {g.id, h.id}
        for x in self.groups:
            if h.id in x.deps:
                x.deps = (x.deps - {h.id}) | ({g.id} if x is not g else set())
        for v, gid in self.group_of.items():
            if gid == h.id:
                self.group_of[v] = g.id
        h.kind, h.members, h.deps, h.merged_into = "merged", [], set(), g.id

    def canonical(self, gid: int) -> int:
        while self.groups[gid].kind == "merged":
            gid = self.groups[gid].merged_into
        return gid

    def read_by_gemm_flags(self, b: Binding) -> bool:
        """Whether ``b`` swaps the last two axes of a value only float matrix products
        read: it stays a binding of its own, so that each product reads the untransposed
        value through gemm's transpose flag (``blas_calls.gemm_call``) and the transpose
        goes with dead-code elimination.  Fused into its producer's program it became a
        second, transposed output that the program wrote element by element (a gradient's
        ``h.T @ ct``: 4x slower than the step it belonged to).  So does a transpose keeping
        the last axis last that only products read, directly or through such a swap (a
        view of rows, which a backend reading strided operands passes in place)."""
        if b.kind != "primitive" or b.callee.name != "transpose":
            return False
        perm = tuple(b.params["perm"])
        if swaps_last_two_axes(b):
            readers = ("matmul",)
        elif len(perm) >= 2 and perm[-1] == len(perm) - 1:
            # a view of rows (``blas_calls.rows_view``): products read it in place where the
            # backend reads strided operands, else Legalize copies it on its own
            readers = ("matmul", "transpose")
        else:
            return False
        users = self.uses.get(b.outvars[0], [])
        return bool(users) and all(u < len(self.fn.bindings) and self._product_reads(self.fn.bindings[u], readers)
                                   for u in users)

    def _product_reads(self, u: Binding, readers: tuple) -> bool:
        if u.kind != "primitive" or u.callee.name not in readers:
            return False
        if u.callee.name == "transpose":     # the last two axes swapped, for products alone
            return self.read_by_gemm_flags(u) and swaps_last_two_axes(u)
        return u.outvars[0].type.dtype in BLAS

    def run(self) -> list[_Group]:
        for index, b in enumerate(self.fn.bindings):
            pattern = "opaque" if self.read_by_gemm_flags(b) else op_pattern(b)
            producers = []
            for a in b.args:
                gid = self.group_of.get(a) if isinstance(a, Var) else None
                if gid is not None and gid not in producers:
                    producers.append(gid)
            target = None
            if pattern in ("injective", "reduction"):
                # latest group first, but a reduction's epilogue stays with its reduction
                order = sorted(producers, key=lambda h: (self.groups[h].kind == "reduction", h), reverse=True)
                for gid in order:
                    g = self.groups[gid]
                    others = [h for h in producers if h != gid]
                    if self.chain(g, b) <= MAX_FUSED_DEPTH and self.fits(g, b, pattern, index) and \
                            not self.index_inside(b, {gid}) and not any(self.reaches(gid, h) for h in others):
                        target = g
                        break
            if target is None:
                target = _Group(len(self.groups), pattern, index)
                self.groups.append(target)
                if pattern in ("injective", "output_fusable"):
                    target.count = prod(b.outvars[0].type.shape)
                elif pattern == "reduction":
                    target.kind = "injective"          # a lone reduction starts a group
                    target.count = prod(b.args[0].type.shape)
                    target.members = []
                    self.join(target, b, pattern, index)
            else:
                self.join(target, b, pattern, index)
                for h in producers:          # scalars computed from dims alone: inlined
                    if h != target.id and self.constant(self.groups[h], index):
                        self.merge(target, self.groups[h])
                producers = [self.canonical(h) for h in producers]
                for h in producers:          # sibling row-wise groups over the same rows,
                    # or elementwise siblings of one count (the shifted slices of a stencil)
                    if h != target.id and target.depth + self.groups[h].depth <= MAX_FUSED_DEPTH and \
                            not any(self.index_inside(self.fn.bindings[m], {h}) for m in target.members) and \
                            (self.mergeable(target, self.groups[h]) or
                             self.siblings(target, self.groups[h], index)):
                        self.merge(target, self.groups[h])
                producers = [self.canonical(h) for h in producers]
            target.deps.update(h for h in producers if h != target.id)
            d = self.chain(target, b)
            target.depth = max(target.depth, d)
            for v in b.outvars:
                self.group_of[v] = target.id
                self.depth[v] = d
        return self.groups


def _group_name(bindings: list, taken: set) -> str:
    parts: list = []
    for b in bindings:
        n = b.callee.name.replace(".", "_")
        if n not in parts and n not in ("reshape", "broadcast_to", "convert"):
            parts.append(n)
    base = "fused_" + "_".join(parts[:5] or ["copy"])
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def _subfunction(fn: Function, members: list, uses: dict, taken: set) -> tuple[Function, list, list]:
    """The members as a primitive Function; returns it, its call's args and outvars."""
    bindings = [fn.bindings[i] for i in members]
    inside = {v for b in bindings for v in b.outvars}
    member_set = set(members)
    args, params, subst = [], [], {}
    for b in bindings:
        for a in b.args:
            if isinstance(a, Var) and a not in inside and a not in subst:
                p = Var(a.type, a.hint)
                subst[a] = p
                args.append(a)
                params.append(p)
    outs = [v for b in bindings for v in b.outvars
            if any(u not in member_set for u in uses.get(v, []))]
    new = [Binding(b.outvars, b.callee, [subst.get(a, a) if isinstance(a, Var) else a for a in b.args],
                   b.params, b.source) for b in bindings]
    names = [f"p{k}" for k in range(len(params))]
    sub = Function(_group_name(bindings, taken), params, names, new, outs, fn.bounds, [],
                   {"primitive": True})
    return sub, args, outs


def _buildable(sub: Function, kind: str) -> bool:
    try:
        fused_primfunc(sub, kind)
    except FusionError:
        return False
    return True


def _dim_scalar(b: Binding, is_one) -> bool:
    """Whether ``b`` computes one value of one element (``is_one`` decides its element
    count) from dims alone, reading no array: ``convert(m * n)`` of a mean."""
    return len(b.outvars) == 1 and not any(isinstance(a, Var) for a in b.args) and \
        is_one(prod(b.outvars[0].type.shape))


def _rematerialize_dim_scalars(fn: Function) -> Function:
    """A copy of each one-element value computed from dims alone (``convert(m)``) for
    every binding after the first that reads it, so that each consumer's group computes its
    own (``_Fuser.constant``); CSE shares them, which would leave them a kernel of their own."""
    uses = fn.uses()
    copies: dict = {}          # user index -> [(original var, copy binding)]
    for b in fn.bindings:
        if op_pattern(b) != "injective" or not _dim_scalar(b, lambda n: n == 1):
            continue
        v = b.outvars[0]
        users = sorted({u for u in uses.get(v, []) if u < len(fn.bindings)})   # not the results
        for user in users[1:]:
            c = Var(v.type, v.hint)
            copies.setdefault(user, []).append((v, Binding([c], b.callee, list(b.args), b.params, b.source)))
    if not copies:
        return fn
    bindings = []
    for i, b in enumerate(fn.bindings):
        subst = {}
        for v, cb in copies.get(i, []):
            bindings.append(cb)
            subst[v] = cb.outvars[0]
        bindings.append(Binding(b.outvars, b.callee, [subst.get(a, a) if isinstance(a, Var) else a
                                                      for a in b.args], b.params, b.source) if subst else b)
    return Function(fn.name, fn.params, fn.param_names, bindings, fn.results, fn.bounds, fn.guards, fn.attrs)


# A group FuseTIR cannot build as one program gives up its last members one at a time, at
# most this many times (each try builds the program): a row-wise group whose final
# transpose reads a row value across rows still fuses everything before that transpose.
MAX_TRIMS = 8


def _build_group(fn: Function, g: _Group, uses: dict, taken: set):
    """``(sub-function, args, outs, members)`` for group ``g``, or for its longest prefix
    (in program order, so closed under its members' inputs) that FuseTIR can build, within
    ``MAX_TRIMS`` tries; None when no prefix worth a call builds."""
    members = list(g.members)
    for _ in range(MAX_TRIMS + 1):
        compute = [i for i in members if fn.bindings[i].callee.name != "reshape"]
        if len(members) < 2 or len(compute) < 2 and g.kind != "reduction" or \
                g.kind in ("opaque", "merged"):
            return None
        if g.kind == "output_fusable" and len(members) < len(g.members):
            return None                  # the matmul keeps its whole epilogue or none
        sub, args, outs = _subfunction(fn, members, uses, taken)
        sub.attrs["kind"] = g.kind
        if g.kind == "output_fusable":
            sub.attrs["epilogue"] = "reduction" if g.full is not None else "injective"
        if _buildable(sub, g.kind):
            return sub, args, outs, members
        taken.discard(sub.name)
        members = members[:-1]
    return None


def fuse_function(fn: Function, taken: set) -> tuple[Function, list]:
    """``fn`` with its fusable groups replaced by calls; also the new sub-functions."""
    if fn.attrs.get("primitive"):
        return fn, []
    original, fn = fn, _rematerialize_dim_scalars(fn)
    groups = _Fuser(fn).run()
    uses = fn.uses()
    replace: dict = {}          # first member index -> call binding; other members dropped
    drop: set = set()
    subs = []
    for g in groups:
        built = _build_group(fn, g, uses, taken)
        if built is None:
            continue
        sub, args, outs, members = built
        subs.append(sub)
        replace[members[-1]] = Binding(outs, sub, args, {}, fn.bindings[members[-1]].source)
        drop.update(members)
    if not subs:
        return original, []
    # Emit in dependency order: a group's call sits where its last member was, which is
    # after all its inputs; values a group produces early may be used by bindings placed
    # before that point, so order the result topologically.
    items = []
    for i, b in enumerate(fn.bindings):
        if i in replace:
            items.append(replace[i])
        elif i not in drop:
            items.append(b)
    return Function(fn.name, fn.params, fn.param_names, _toposort(fn.params, items), fn.results,
                    fn.bounds, fn.guards, fn.attrs), subs


def _toposort(params: list, items: list) -> list:
    ready = set(params)
    pending = list(items)
    out = []
    while pending:
        for k, b in enumerate(pending):
            if all(not isinstance(a, Var) or a in ready for a in b.args):
                out.append(b)
                ready.update(b.outvars)
                del pending[k]
                break
        else:
            raise AssertionError("FuseOps produced a cycle between groups")
    return out


def _fuse_ops(module: IRModule) -> IRModule:
    fns = dict(module.functions)
    taken = set(fns)
    for name, f in module.functions.items():
        if isinstance(f, Function):
            new, subs = fuse_function(f, taken)
            fns[name] = new
            for s in subs:
                fns[s.name] = s
    return IRModule(fns, module.entry)


fuse_ops = Pass("FuseOps", _fuse_ops)
