"""``rj.autobatch``'s engine: recording cell calls as nodes (the hook ``Jitted.__call__``
calls), then, when values are needed, planning the pending nodes (types, the policy's
batches, the memory layout, the arenas' rows) and running the batches
(``relaxjax.autobatch_arena``: operands read from the arenas, the cell vmapped and jitted
once per layout).  See ``relaxjax.autobatch`` for the design and
``relaxjax.autobatch_policy`` for the scheduling.
"""
from __future__ import annotations

import time
from bisect import bisect_right
from collections import Counter
from operator import itemgetter

import numpy as np
import optree

from .autobatch_arena import Arena, run_batch
from .autobatch_lazy import Lazy, _Batch, _Kind, _Node, _ident, _split_ident, _SCALARS
from .autobatch_policy import Graph, order_for_layout, schedule_agenda, schedule_depth
from .jit import _CALL_HOOK, Jitted


def _split(group: list, idx: list, in_axes) -> dict:
    """The nodes (indices ``idx``, arguments ``group``) grouped by the objects they pass at
    the positions ``in_axes`` passes once (all of them for None), where those differ."""
    first = group[0]
    split = [k for k, x0 in enumerate(first) if (in_axes is None or in_axes[k] is None)
             and not all(a[k] is x0 for a in group)]
    if not split:
        return {(): idx}
    # equal Python scalars are one argument (a position's scalars share a type: the kind's);
    # the identities read column by column in C, a node's key their tuple
    cols = [list(map(itemgetter(k), group)) if isinstance(first[k], _SCALARS)
            else list(map(id, map(itemgetter(k), group))) for k in split]
    groups: dict = {}
    for i, ident in zip(idx, zip(*cols)):
        g = groups.get(ident)
        if g is None:
            groups[ident] = [i]
        else:
            g.append(i)
    return groups


class _Run:
    """One ``autobatch`` call: the nodes recorded and not run yet."""

    def __init__(self, owner: object):
        self.owner = owner
        self.kinds = owner._kinds
        self.pending: list = []
        self.starts: list = [0]               # where each instance's pending nodes begin
        self.arenas: dict = {}                # (shape, dtype) -> Arena, for every flush of the call
        # cell -> (kind, argument signature, arguments) of its last call that built the signature
        # (per call: it holds the arguments)
        self.last: dict = {}

    def record(self, cell: Jitted, args: tuple, kwargs: dict):
        """The recording hook (``Jitted.__call__`` calls it instead of computing).  Every
        node of a run passes through here, so it is written for speed: locals, no helper
        calls, the common output forms built inline, and first a check against the cell's
        previous call (``last``: its kind, argument signature and arguments), which a model
        calling a cell again and again with arguments of one signature (the same weights)
        passes without building and hashing the signature.  (An array passed again is taken
        to keep its shape and dtype: NumPy can change them in place, ``a.shape = ...``, which
        would make the batched call fail, not compute something else.)"""
        if kwargs:
            return self._record_tree(cell, args, kwargs)
        kind = None
        cached = self.last.get(cell)
        if cached is not None and len(cached[1]) == len(args):
            depth, ins, k = 0, (), 0
            objs = cached[2]
            for x, e in zip(args, cached[1]):
                t = type(x)
                if t is Lazy:
                    s = x.sig
                    if s is not e and s != e:
                        break
                    if x.run is not self:
                        raise ValueError(f"autobatch: argument {k} of {cell.__name__} is a lazy value of "
                                         f"another autobatch call")
                    n = x.node
                    if n.batch is None:
                        if ins:
                            ins.append((k, n.pos))
                        else:
                            ins = [(k, n.pos)]
                        if n.depth > depth:
                            depth = n.depth
                elif t is np.ndarray:         # the same array (weights), or one of the same signature
                    if x is not objs[k] and (type(e) is not tuple or x.shape != e[0] or x.dtype != e[1]):
                        break
                elif t is not e:              # a Python scalar of the signature's type, else no match
                    break
                k += 1
            else:
                kind = cached[0]
        if kind is None:
            # (the loop above, with the signature built: kept apart and inline, as this runs
            # once per cell call and a helper call per argument costs more than it saves)
            sig = []
            depth, ins, k = 0, (), 0
            for x in args:
                t = type(x)
                if t is Lazy:
                    if x.run is not self:
                        raise ValueError(f"autobatch: argument {k} of {cell.__name__} is a lazy value of "
                                         f"another autobatch call")
                    n = x.node
                    if n.batch is None:
                        if ins:
                            ins.append((k, n.pos))
                        else:
                            ins = [(k, n.pos)]
                        if n.depth > depth:
                            depth = n.depth
                    sig.append(x.sig)
                elif t is np.ndarray:
                    sig.append((x.shape, x.dtype))
                elif t is float or t is int or t is bool or t is complex:
                    sig.append(t)             # a Python scalar: weak, as in the cell's own call
                else:
                    return self._record_tree(cell, args, kwargs)
                k += 1
            sig = tuple(sig)
            key = (cell, None, sig)
            kind = self.kinds.get(key)
            if kind is None:
                kind = self.owner._new_kind(key, args)
            self.last[cell] = (kind, sig, args)
        pending = self.pending
        node = _Node(kind, args, depth + 1, len(pending), ins)
        pending.append(node)
        form, outs = kind.out_form, kind.out_sigs
        if form == 2:
            if len(outs) == 2:                # (h, c): the common case, no comprehension
                return Lazy(node, 0, outs[0], self), Lazy(node, 1, outs[1], self)
            return tuple([Lazy(node, j, s, self) for j, s in enumerate(outs)])
        if form == 1:
            return Lazy(node, 0, outs[0], self)
        return self._outputs(node, kind)

    def _record_tree(self, cell: Jitted, args: tuple, kwargs: dict):
        """Arguments that are containers, keywords, None or other array types."""
        leaves, tree = optree.tree_flatten((args, kwargs), none_is_leaf=False)
        sig, depth, ins = [], 0, []
        for i, x in enumerate(leaves):
            if type(x) is Lazy:
                if x.run is not self:
                    raise ValueError(f"autobatch: argument leaf {i} of {cell.__name__} is a lazy value of "
                                     f"another autobatch call")
                sig.append(x.sig)
                if x.node.batch is None:
                    ins.append((i, x.node.pos))
                    depth = max(depth, x.node.depth)
            elif isinstance(x, _SCALARS):
                sig.append(type(x))
            else:
                a = np.asarray(x)
                sig.append((a.shape, a.dtype))
        key = (cell, tree, tuple(sig))
        kind = self.kinds.get(key)
        if kind is None:
            kind = self.owner._new_kind(key, leaves)
        node = _Node(kind, leaves, depth + 1, len(self.pending), ins)
        self.pending.append(node)
        return self._outputs(node, kind)

    def _outputs(self, node: _Node, kind: _Kind):
        outs = [s if sig is None else Lazy(node, k, sig, self)
                for k, (s, sig) in enumerate(zip(kind.outs, kind.out_sigs))]
        return optree.tree_unflatten(kind.out_tree, outs)

    def release(self) -> None:
        """The call is over: drop what ties its objects into cycles (the last calls' arguments,
        which hold lazy values, which hold the run), so reference counting frees them."""
        self.last.clear()
        self.pending = []

    # ------------------------------------------------------------------------- planning
    def flush(self) -> None:
        """Plan and run every pending node (the batches' own cell calls compute: the
        recording hook is off meanwhile)."""
        nodes, self.pending = self.pending, []
        if not nodes:
            return
        self.starts, starts = [0], self.starts
        saved = list(_CALL_HOOK)
        _CALL_HOOK.clear()
        s = self.owner._stats
        try:
            t0 = time.perf_counter()
            batches = self._plan(nodes, starts)
            t1 = time.perf_counter()
            for b in batches:
                run_batch(self.owner, b)
            s["plan_s"] += t1 - t0
            s["run_s"] += time.perf_counter() - t1
        finally:
            _CALL_HOOK[:] = saved

    def _types(self, nodes: list, starts: list):
        """Each node's type (index), the types' labels, kinds and in_axes.

        A kind's argument positions are batched (axis 0) or passed once (None).  Passed
        once: the same object in every node, or a *parameter*: every object at that
        position is passed by nodes of two instances or more (a weight; per-instance data,
        even an array one instance passes twice, is not).  Decided on a flush holding
        several instances of the kind, the layout sticks to the kind (one compile; a position
        once batched stays batched); a flush of one instance uses it, or, before any,
        guesses (an object passed twice is a parameter) without keeping the guess (a first
        call of one instance can so compile a layout the next calls do not use).  The nodes
        are then split into types by the objects at the positions passed once, so every
        batch passes one object there.  ``starts``: where each instance's
        nodes begin."""
        by_kind: dict = {}
        for i, n in enumerate(nodes):
            g = by_kind.get(n.kind)
            if g is None:
                by_kind[n.kind] = [i]
            else:
                g.append(i)
        type_of = [0] * len(nodes)
        labels, kinds, axes = [], [], []
        for kind, idx in by_kind.items():
            group = [nodes[i].args for i in idx]
            multi = bisect_right(starts, idx[0]) != bisect_right(starts, idx[-1])
            guessed = False
            in_axes = kind.layout                # one node and no layout yet: the cell itself
            if len(idx) > 1:
                if in_axes is None:
                    in_axes, guessed = self._layout(kind, group, idx, starts, multi)
                    groups = _split(group, idx, in_axes)
                else:                            # the kind's layout, unless it splits too much
                    groups = _split(group, idx, in_axes)
                    if multi and len(groups) > max(8, len(idx) // 4):
                        in_axes, guessed = self._layout(kind, group, idx, starts, multi)
                        groups = _split(group, idx, in_axes)
            else:
                groups = {(): idx}
            for members in groups.values():
                t = len(labels)
                if kind.split:                   # weight sets: numbered, stable across calls
                    args = nodes[members[0]].args
                    ident = tuple([_split_ident(args[k]) for k in kind.split])
                    labels.append(f"{kind.label}/{kind.params.setdefault(ident, len(kind.params))}")
                else:
                    labels.append(kind.label)
                kinds.append(kind)
                # a guess compiles no batched cell for one node
                axes.append(None if guessed and len(members) == 1 else in_axes)
                if len(members) == len(nodes):
                    type_of = [t] * len(nodes)
                else:
                    for i in members:
                        type_of[i] = t
        return type_of, labels, kinds, axes

    @staticmethod
    def _layout(kind: _Kind, group: list, idx: list, starts: list, multi: bool):
        """The in_axes of a kind's nodes (see ``_types``), and whether it is a guess."""
        in_axes, params, inst = [], [], None
        for k, x0 in enumerate(group[0]):
            if type(x0) is Lazy:
                in_axes.append(0)
                continue
            if all(a[k] is x0 for a in group):
                in_axes.append(None)
                continue
            idents = [_ident(a[k]) for a in group]
            if None in idents or 2 * len(set(idents)) > len(idents):
                param = False                     # a lazy value, or an object passed once
            elif multi:
                if inst is None:
                    inst = [bisect_right(starts, i) for i in idx]
                seen: dict = {}
                for d, j in zip(idents, inst):
                    f = seen.get(d)
                    if f is None:
                        seen[d] = j
                    elif f != j:
                        seen[d] = -1              # passed by two instances
                param = all(j == -1 for j in seen.values())
            else:
                param = min(Counter(idents).values()) >= 2
            in_axes.append(None if param else 0)
            if param:
                params.append(k)
        if multi and kind.layout is not None:     # batched once, batched for good
            in_axes = [0 if a == 0 or b == 0 else None for a, b in zip(in_axes, kind.layout)]
        in_axes = tuple(in_axes)
        if all(a is None for a in in_axes):
            return None, False                    # every node alike: one call, broadcast
        if not multi:
            return in_axes, True                  # a guess, not kept
        kind.layout = in_axes
        kind.split = tuple(sorted(set(kind.split) | set(params)))
        return in_axes, False

    def _plan(self, nodes: list, starts: list | None = None) -> list:
        owner = self.owner
        type_of, labels, kinds, axes = self._types(nodes, starts or [0])
        depths = [n.depth for n in nodes]
        g = Graph(type_of, depths, [n.ins for n in nodes], labels, 1 + max([k.arity for k in kinds]))
        if owner.policy == "depth":
            order = schedule_depth(g)
        elif owner.policy == "agenda":
            order = schedule_agenda(g)
        else:
            if owner._train_calls_left > 0:
                owner._fsm.train(g, owner.episodes)
            order = owner._fsm.schedule(g)
        if owner.layout:
            order_for_layout(g, order)
        batches = []
        counts: dict = {}                     # rows this flush adds to each arena
        for idx in order:
            t = type_of[idx[0]]
            kind = kinds[t]
            b = _Batch(kind, [nodes[i] for i in idx], axes[t])
            bases = []
            for sig in kind.out_sigs:
                if sig is None:
                    bases.append(None)
                    continue
                base = counts.get(sig, 0)
                counts[sig] = base + len(idx)
                bases.append(base)
            b.bases = bases
            for pos, n in enumerate(b.nodes):
                n.pos, n.batch = pos, b
            batches.append(b)
        arenas, first = self.arenas, {}
        for sig, count in counts.items():
            a = arenas.get(sig)
            if a is None:
                a = arenas[sig] = Arena(sig, count)
            first[sig] = a.reserve(count)
        for b in batches:
            b.arenas = [None if sig is None else arenas[sig] for sig in b.kind.out_sigs]
            b.bases = [None if base is None else base + first[sig] for sig, base in zip(b.kind.out_sigs, b.bases)]
        s = owner._stats
        s["nodes"] += len(nodes)
        s["batches"] += len(batches)
        # a node's depth counts the pending calls it waits on: the longest chain in this flush
        s["levels"] += max(depths, default=0)
        return batches


def _results(results: list) -> list:
    """The lazy values among ``fn``'s results replaced by their values: views of an arena
    where the results hold at least half its rows (a tagger's logits: no copy), copies
    otherwise (a tree's roots: the arena of every state is not kept alive for them)."""
    flat = [optree.tree_flatten(r, none_is_leaf=False) for r in results]
    rows: dict = {}                           # arena -> the results it holds
    for leaves, _ in flat:
        for v in leaves:
            if type(v) is Lazy:
                b = v.node.batch
                if b is None or not b.done:
                    v.force()
                    b = v.node.batch
                a = b.arenas[v.k]
                rows[a] = rows.get(a, 0) + 1
    whole = {a for a, n in rows.items() if 2 * n >= a.used}
    out = []
    for leaves, tree in flat:
        vals = []
        for v in leaves:
            if type(v) is Lazy:
                n = v.node
                b = n.batch
                a = b.arenas[v.k]
                x = a.data[b.bases[v.k] + n.pos, ...]        # (a 0-d array, not a NumPy scalar)
                vals.append(x if a in whole else x.copy())
            else:
                vals.append(v)
        out.append(optree.tree_unflatten(tree, vals))
    return out
