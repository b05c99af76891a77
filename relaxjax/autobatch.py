"""Auto-batching of per-instance code (ACRoBat, Fegade et al., MLSys 2024; DyNet's agenda):
``rj.autobatch(fn)(instances)`` runs ``fn`` on each instance, written for one instance in
plain Python (recursion over a tree, loops over a sequence), and batches its calls of
``@rj.jit`` *cells* across instances and across the independent calls of one instance.

While ``fn`` runs, a cell call does not compute: it records a *node* (the cell, its arguments)
and returns *lazy* results (:class:`Lazy`), whose shapes come from tracing the cell
(``Jitted.eval_shape``, once per argument signature).  Each node gets its depth inline, one
more than its deepest lazy argument's.  Then the nodes run in batches, one per cell and
argument signature at a time, chosen by the policy:

* ``"depth"`` (ACRoBat, TensorFlow Fold): all the nodes of one depth, cell by cell, depth by
  depth;
* ``"agenda"`` (DyNet): among the cells with nodes whose arguments are computed, the one
  with the most such nodes, again and again.

A batch is the cell mapped over the batch (``rj.vmap``: arguments the nodes share, such as
weights, are passed once, the others stacked), jitted once per cell and argument layout: the
batch size is a symbolic dim, so one compile serves every batch of every size (coarse grain:
the whole cell, fused, not op by op).  A lazy value used as an array (``float(p)``, ``np.asarray``:
an early exit testing a confidence) makes every node recorded so far run first, so the
result is always what ``fn`` computes instance by instance; such code batches less.

Not yet here (issue 21's later steps): suspending an instance at such a test while the
others run ahead, ED-Batch's learned (FSM) policy and its memory layout, reading operands
through index arrays inside the kernels instead of stacking them.
"""
from __future__ import annotations

import gc
from collections import defaultdict
from typing import Callable, Sequence

import numpy as np
import optree

from .jit import _CALL_HOOK, Jitted, jit
from .structs import ShapeDtypeStruct
from .vmap import vmap

__all__ = ["autobatch", "AutoBatched", "Lazy"]

POLICIES = ("depth", "agenda")


class Lazy:
    """A cell's result not computed yet: its node, with the shape and dtype tracing gave it
    (``sig``: both, as a node's key holds them)."""
    __slots__ = ("node", "struct", "value", "run", "sig")

    def __init__(self, node, struct: ShapeDtypeStruct, run: "_Run"):
        self.node, self.struct, self.run = node, struct, run
        self.sig = (struct.shape, struct.dtype.str)
        self.value = None

    @property
    def shape(self):
        return self.struct.shape

    @property
    def dtype(self):
        return self.struct.dtype

    @property
    def ndim(self) -> int:
        return len(self.struct.shape)

    def force(self) -> np.ndarray:
        if self.value is None:
            self.run.flush()
        return self.value

    def __array__(self, dtype=None, copy=None):
        v = self.force()
        return v if dtype is None else v.astype(dtype)

    def __float__(self):
        return float(self.force())

    def __int__(self):
        return int(self.force())

    def __bool__(self):
        return bool(self.force())

    def __getattr__(self, name: str):
        """Anything else (``h.sum()``, ``h.T``): the value's, computed first."""
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.force(), name)

    def __getitem__(self, index):
        return self.force()[index]

    def __len__(self) -> int:
        return len(self.force())

    def __repr__(self) -> str:
        state = "computed" if self.value is not None else f"pending, depth {self.node.depth}"
        return f"Lazy({self.struct}, {state})"


def _forcing(name: str):
    def op(self, *others):
        return getattr(self.force(), name)(*others)
    op.__name__ = name
    return op


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__pow__", "__neg__", "__matmul__", "__rmatmul__", "__lt__", "__le__",
              "__gt__", "__ge__", "__eq__", "__ne__"):
    setattr(Lazy, _name, _forcing(_name))
del _name
Lazy.__hash__ = object.__hash__


class _Node:
    __slots__ = ("cell", "leaves", "tree", "depth", "outs", "key")

    def __init__(self, cell, leaves, tree, depth, key):
        self.cell, self.leaves, self.tree, self.depth, self.key = cell, leaves, tree, depth, key
        self.outs: list = []


def _struct_of(x):
    if isinstance(x, Lazy):
        return x.struct
    if isinstance(x, (bool, int, float, complex)):
        return x                              # traced as the weak Python scalar it is
    a = np.asarray(x)
    return ShapeDtypeStruct(a.shape, a.dtype)


class _Run:
    """One ``autobatch`` call: the nodes recorded and not run yet, and the statistics."""

    def __init__(self, owner: "AutoBatched"):
        self.owner = owner
        self.pending: list = []

    def record(self, cell: Jitted, args: tuple, kwargs: dict):
        leaves, tree = optree.tree_flatten((args, kwargs), none_is_leaf=False)
        # a node's key: the cell, the argument tree, each leaf's shape and dtype (which
        # concrete leaves the nodes share is decided per batch)
        sig, depth = [], 0
        for x in leaves:
            if type(x) is Lazy:
                if x.run is not self:
                    raise ValueError("autobatch: a lazy value of another autobatch call was passed to a cell")
                sig.append(x.sig)
                if x.value is None and x.node.depth > depth:
                    depth = x.node.depth
            elif type(x) is np.ndarray:
                sig.append((x.shape, x.dtype.str))
            elif isinstance(x, (bool, int, float, complex)):
                sig.append(type(x))            # a Python scalar: weak, as in the cell's own call
            else:
                a = np.asarray(x)
                sig.append((a.shape, a.dtype.str))
        key = (id(cell), tree, tuple(sig))
        out_leaves, out_tree = self.owner._out_shapes(cell, key, leaves)
        node = _Node(cell, leaves, tree, depth + 1, key)
        node.outs = [Lazy(node, s, self) if type(s) is ShapeDtypeStruct else s for s in out_leaves]
        self.pending.append(node)
        self.owner._stats["nodes"] += 1
        return optree.tree_unflatten(out_tree, node.outs)

    def flush(self) -> None:
        """Run every pending node, in batches chosen by the policy (the batches' own calls
        compute: the recording hook is off meanwhile)."""
        saved = list(_CALL_HOOK)
        _CALL_HOOK.clear()
        try:
            if self.owner.policy == "depth":
                # a node's inputs are all shallower: depth by depth, every group is ready
                groups: dict = defaultdict(list)
                for n in self.pending:
                    groups[n.depth, n.key].append(n)
                self.pending = []
                for k in sorted(groups, key=lambda k: k[0]):
                    self._run_batch(groups[k])
            while self.pending:
                batch = self._next_batch()
                self._run_batch(batch)
                done = set(map(id, batch))
                self.pending = [n for n in self.pending if id(n) not in done]
        finally:
            _CALL_HOOK[:] = saved

    def _ready(self, node) -> bool:
        return all(x.value is not None for x in node.leaves if isinstance(x, Lazy) and x.node is not node)

    def _next_batch(self) -> list:
        """The agenda policy's next batch: the largest group of ready nodes of one kind."""
        groups: dict = defaultdict(list)
        for n in self.pending:
            if self._ready(n):
                groups[n.key].append(n)
        return max(groups.values(), key=len)

    def _run_batch(self, nodes: list) -> None:
        first = nodes[0]
        n = len(first.leaves)
        layouts = self.owner._layouts
        if len(nodes) == 1 and first.key in layouts:
            # one node cannot tell its shared arguments from its own: as the last batch of
            # its kind decided (one compile for both)
            shared = list(layouts[first.key])
        else:
            shared = [not isinstance(first.leaves[k], Lazy) and
                      all(_same(m.leaves[k], first.leaves[k]) for m in nodes) for k in range(n)]
            if len(nodes) > 1:
                layouts[first.key] = tuple(shared)
        args = []
        for k in range(n):
            if shared[k]:
                args.append(first.leaves[k])
            else:
                args.append(np.stack([np.asarray(m.leaves[k].value if isinstance(m.leaves[k], Lazy)
                                                  else m.leaves[k]) for m in nodes]))
        if all(shared):                    # one node (or all alike): the cell itself, unbatched
            args_, kwargs = optree.tree_unflatten(first.tree, args)
            outs = optree.tree_map(lambda v: np.asarray(v)[None], first.cell(*args_, **kwargs),
                                   none_is_leaf=False)
        else:
            mapped = self.owner._batched_cell(first.cell, first.tree, tuple(None if s else 0 for s in shared))
            outs = mapped(*args)
        out_leaves = optree.tree_leaves(outs, none_is_leaf=False)
        kept = [k for k, o in enumerate(first.outs) if isinstance(o, Lazy)]
        for j, m in enumerate(nodes):
            for k, v in zip(kept, out_leaves):
                m.outs[k].value = np.asarray(v[j])
        self.owner._stats["batches"] += 1


def _same(a, b) -> bool:
    """One argument for every node of a batch: the same array, or equal Python scalars."""
    if a is b:
        return True
    return isinstance(a, (bool, int, float, complex)) and type(a) is type(b) and a == b


class AutoBatched:
    """``rj.autobatch(fn, policy=...)``: call it with a list of instances."""

    def __init__(self, fn: Callable, policy: str = "depth"):
        if policy not in POLICIES:
            raise ValueError(f"autobatch: policy must be one of {POLICIES}, got {policy!r}")
        self.fn, self.policy = fn, policy
        self._shapes: dict = {}               # (cell, tree, signature) -> output structs
        self._cells: dict = {}                # (cell, tree, in_axes) -> the jitted vmapped cell
        self._layouts: dict = {}              # node key -> which arguments batches shared
        self._stats = {"instances": 0, "nodes": 0, "batches": 0}

    def __call__(self, instances: Sequence) -> list:
        run = _Run(self)

        def hook(cell, args, kwargs):
            return run.record(cell, args, kwargs)
        if _CALL_HOOK:
            raise RuntimeError("autobatch calls do not nest")
        _CALL_HOOK.append(hook)
        # thousands of small objects (nodes, lazy values: cycles) would trigger the cyclic
        # collector over the whole heap again and again: it waits until the batches ran
        collecting = gc.isenabled()
        gc.disable()
        try:
            results = [self.fn(x) for x in instances]
            _CALL_HOOK.clear()
            run.flush()
        finally:
            _CALL_HOOK.clear()
            if collecting:
                gc.enable()
        self._stats["instances"] += len(instances)
        return [optree.tree_map(lambda v: v.value if isinstance(v, Lazy) else v, r, none_is_leaf=False)
                for r in results]

    def stats(self) -> dict:
        """Instances, nodes recorded, batches launched, and the compiles of the batched cells
        (one per cell and argument layout, whatever the batch sizes)."""
        return dict(self._stats, compiles=sum(f.cache_info().compiles for f in self._cells.values()))

    def _out_shapes(self, cell: Jitted, key, leaves):
        """The cell's results for a node's key, flattened: (leaves, tree), by tracing once."""
        outs = self._shapes.get(key)
        if outs is None:
            structs = [_struct_of(x) for x in leaves]
            args, kwargs = optree.tree_unflatten(key[1], structs)
            outs = self._shapes[key] = optree.tree_flatten(cell.eval_shape(*args, **kwargs),
                                                           none_is_leaf=False)
        return outs

    def _batched_cell(self, cell: Jitted, tree, in_axes: tuple):
        key = (id(cell), tree, in_axes)
        f = self._cells.get(key)
        if f is None:
            def flat(*leaves):
                args, kwargs = optree.tree_unflatten(tree, list(leaves))
                return cell.fun(*args, **kwargs)
            f = self._cells[key] = jit(vmap(flat, in_axes=in_axes))
        return f


def autobatch(fn: Callable, policy: str = "depth") -> AutoBatched:
    """``fn`` (one instance in, its result out, calling ``@rj.jit`` cells) over a list of
    instances with the cells' calls batched (see the module's docstring)."""
    return AutoBatched(fn, policy)
