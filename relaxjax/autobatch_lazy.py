"""``rj.autobatch``'s recorded graph: the lazy values a cell call returns while ``fn`` is
recorded (:class:`Lazy`), the nodes (one per call), their kinds (what the calls of one cell
and argument signature share: traced result shapes, a label, the batch layout) and batches.
Kept apart from the recording and running (``autobatch_run``) and the public entry point
(``autobatch``) so each stays readable; see ``relaxjax.autobatch`` for the design.
"""
from __future__ import annotations

import numpy as np
import optree

from .jit import Jitted
from .structs import ShapeDtypeStruct

_SCALARS = (bool, int, float, complex)


class Lazy:
    """A cell's result, maybe not computed yet: result ``k`` (flattened) of ``node``;
    ``sig`` is its (shape, dtype).  Used as an array, it runs what is pending first."""
    __slots__ = ("node", "k", "sig", "run")

    def __init__(self, node: "_Node", k: int, sig: tuple, run: object):
        self.node, self.k, self.sig, self.run = node, k, sig, run

    @property
    def struct(self) -> ShapeDtypeStruct:
        return self.node.kind.outs[self.k]

    @property
    def shape(self) -> tuple:
        return self.sig[0]

    @property
    def dtype(self) -> np.dtype:
        return self.sig[1]

    @property
    def ndim(self) -> int:
        return len(self.sig[0])

    @property
    def value(self) -> np.ndarray | None:
        """The computed value (a view into its arena), None while pending."""
        b = self.node.batch
        if b is None or not b.done:
            return None
        return b.arenas[self.k].data[b.bases[self.k] + self.node.pos, ...]

    def force(self) -> np.ndarray:
        b = self.node.batch
        if b is None or not b.done:
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
        b = self.node.batch
        state = "computed" if b is not None and b.done else f"pending, depth {self.node.depth}"
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


class _Kind:
    """What the nodes of one cell and argument signature share: the traced results, the
    label (policies and saved FSM tables name types by it), the last batch layout."""
    __slots__ = ("cell", "tree", "arity", "outs", "out_tree", "out_form", "out_sigs", "label", "layout",
                 "params", "split")

    def __init__(self, cell: Jitted, tree, arity: int, outs: list, out_tree, label: str):
        self.cell, self.tree, self.arity, self.outs, self.out_tree, self.label = cell, tree, arity, outs, out_tree, label
        self.out_sigs = [(s.shape, s.dtype) if type(s) is ShapeDtypeStruct else None for s in outs]
        arrays = all(s is not None for s in self.out_sigs)
        # 1: one array; 2: a flat tuple of arrays (built without optree); 0: anything else
        self.out_form = 0
        if arrays and out_tree == optree.tree_structure(0):
            self.out_form = 1
        elif arrays and out_tree == optree.tree_structure((0,) * len(outs)):
            self.out_form = 2
        self.layout = None            # in_axes of the last batch of several nodes
        self.params: dict = {}        # weights identity -> index (type labels)
        self.split: tuple = ()        # parameter positions seen with several objects


class _Node:
    """A recorded call.  ``pos``: its index among the pending nodes until planned, then its
    position in its batch; ``ins``: (argument position, producer's index) per pending lazy
    argument (a flush runs every pending node, so producers pending when a node was
    recorded run in the same flush)."""
    __slots__ = ("kind", "args", "depth", "batch", "pos", "ins")

    def __init__(self, kind: _Kind, args, depth: int, pos: int, ins):
        self.kind, self.args, self.depth, self.batch, self.pos, self.ins = kind, args, depth, None, pos, ins


class _Batch:
    """Nodes of one type run as one call: ``in_axes`` (None: every node alike, the cell
    itself once); per result position, its arena and the first row of the batch's run
    there."""
    __slots__ = ("kind", "nodes", "in_axes", "arenas", "bases", "done")

    def __init__(self, kind: _Kind, nodes: list, in_axes):
        self.kind, self.nodes, self.in_axes, self.done = kind, nodes, in_axes, False


def _struct_of(x):
    if isinstance(x, Lazy):
        return x.struct
    if isinstance(x, _SCALARS):
        return x                              # traced as the weak Python scalar it is
    a = np.asarray(x)
    return ShapeDtypeStruct(a.shape, a.dtype)


def _sig_str(s) -> str:
    if isinstance(s, type):
        return s.__name__
    return f"{s[1].name}{list(s[0])}"


def _ident(x):
    """An argument's identity for telling parameters: None for a lazy value."""
    if type(x) is Lazy:
        return None
    if isinstance(x, _SCALARS):
        return (type(x), x)
    return id(x)


def _split_ident(x):
    """An argument's identity for splitting nodes into types (lazy values included)."""
    if isinstance(x, _SCALARS):
        return (type(x), x)
    return id(x)
