"""Auto-batching of per-instance code (ACRoBat, Fegade et al., MLSys 2024; DyNet; ED-Batch,
Chen et al., ICML 2023): ``rj.autobatch(fn)(instances)`` runs ``fn`` on each instance,
written for one instance in plain Python (recursion over a tree, loops over a sequence),
and batches its calls of ``@rj.jit`` *cells* across instances and across the independent
calls of one instance.  Why: models whose structure changes per input cannot be batched by
hand without rewriting them level by level; run one instance at a time, they pay a kernel
launch (and Python) per small cell call.

While ``fn`` runs, a cell call does not compute: it records a *node* (the cell, its
arguments) and returns *lazy* results (:class:`Lazy`), whose shapes come from tracing the
cell once per argument signature (a *kind*: cell, argument tree, each leaf's shape and
dtype).  A node's depth is computed inline, one more than its deepest pending argument's.
When a value is needed (``fn`` returned or suspended for every instance, or a lazy value is
used as a number: ``float(p)``), every pending node runs, planned first as a whole:

* types: the nodes of one kind, split by the weights they pass (an argument position where
  every object is passed by two instances or more, such as a forward and a backward LSTM's
  weights, is a parameter: one batch never mixes two weight sets, which would stack them);
* the policy chooses the batches (``relaxjax.autobatch_policy``: ``"depth"``, ``"agenda"``,
  or ``"fsm"``, ED-Batch's policy learned by Q-learning on the first calls, which can be
  saved and loaded);
* the layout (ED-Batch's memory planning, ``layout=True``): results live in *arenas*
  (``relaxjax.autobatch_arena``), one array per result shape and dtype for the whole call,
  each batch's results at one result position a contiguous run, appended in execution order
  flush after flush (grown geometrically); each batch's nodes are ordered so that a later
  batch's operand is, where possible, exactly a run of an earlier one's results.
  ``layout=False`` keeps the policy's order, for comparison.

A batch is the cell mapped over the batch (``rj.vmap``: the parameters passed once, the
rest batched), jitted once per cell and argument layout: the batch size is a symbolic dim,
so one compile serves every batch of every size (coarse grain: the whole cell, fused, not op
by op).  Its operands are *scattered* (``scatter=True``): an argument the cell reads
elementwise is passed as the arena and an index array, the take traced into the batched
cell (``vmap(cell)(take(arena, idx, axis=0), ...)``) and fused by the compiler into the
kernels that read it, so nothing is copied; an argument a matrix product reads (gemm needs
it contiguous, the compiled program would copy it) is gathered on the host, a slice view of
the arena where the layout made it a run, else one ``np.take`` (measured as fast as the
copy inside the program, or faster).  Which is which the compiler says, on the first batch
(``autobatch_arena``).  ``scatter=False`` gathers every operand on the host.  ``stats()``
counts the bytes copied to build operands (``gather_bytes``; ``host_gather_bytes`` the
host's part) and the operands read as slices, gathered or indexed.  The values returned
are views of an arena where they fill at least half of it (nothing copied), else copies
(so a few results do not keep every intermediate alive).

Early exits (data-dependent control flow): ``fn`` may be a generator function, as ACRoBat
suspends an instance in a fiber at such a test.  ``v = yield lazy`` (or a pytree of lazy
values) suspends the instance until the value is computed and resumes it with it (a NumPy
array, a copy it may write; a pytree of them), so ``if (yield head(h)) > 0.9: return h``
exits early.  The instances run round-robin: every instance runs until it yields or returns,
then one flush runs all that they recorded (every suspended instance's nodes batched
together) and each is resumed with its values, round after round until all have returned
(``stats()["rounds"]``).  A generator's return value is its result; ``yield from`` a
sub-generator works; an ``fn`` that returns a plain value for some instances (or a generator
that never yields) mixes with the rest.  Anything else yielded (a number, an array, a
pytree with such leaves, None) is a ``TypeError`` naming it, the suspended generators
closed.  A plain ``fn`` that uses a lazy value as a number instead (``float(p)``) runs
everything recorded so far at that point: the same results, batched less (the later
instances are not recorded yet).

Not here: results written into the arenas by the batched cells themselves (they are copied
in, one contiguous run per result and batch), and a product reading its operand's rows
through the index array (gemm's packing would have to gather them).
"""
from __future__ import annotations

import gc
import os
import time
from types import GeneratorType
from typing import Callable, Sequence

import optree

from .autobatch_lazy import Lazy, _Kind, _sig_str, _struct_of
from .autobatch_policy import POLICIES, FSMPolicy
from .autobatch_run import _Run, _results
from .jit import _CALL_HOOK

__all__ = ["autobatch", "AutoBatched", "Lazy", "POLICIES"]


class AutoBatched:
    """``rj.autobatch(fn, ...)``: call it with a list of instances; ``stats()``;
    ``save_policy(path)`` for the fsm policy."""

    def __init__(self, fn: Callable, policy: str = "depth", *, layout: bool = True, scatter: bool = True,
                 policy_file: str | os.PathLike | None = None, train_calls: int | None = None,
                 episodes: int = 100, seed: int = 0):
        if not callable(fn):
            raise TypeError(f"autobatch: fn must be callable, got {fn!r}")
        if policy not in POLICIES:
            raise ValueError(f"autobatch: policy must be one of {POLICIES}, got {policy!r}")
        if not isinstance(layout, bool):
            raise TypeError(f"autobatch: layout must be True or False, got {layout!r}")
        if not isinstance(scatter, bool):
            raise TypeError(f"autobatch: scatter must be True or False, got {scatter!r}")
        if policy_file is not None and policy != "fsm":
            raise ValueError(f"autobatch: policy_file is for policy='fsm', got policy={policy!r}")
        if train_calls is not None and (not isinstance(train_calls, int) or train_calls < 0):
            raise ValueError(f"autobatch: train_calls must be an int >= 0, got {train_calls!r}")
        if not isinstance(episodes, int) or episodes < 1:
            raise ValueError(f"autobatch: episodes must be an int >= 1, got {episodes!r}")
        self.fn, self.policy, self.layout, self.scatter, self.episodes = fn, policy, layout, scatter, episodes
        self._fsm = None
        self._train_calls_left = 0
        if policy == "fsm":
            self._fsm = FSMPolicy(seed=seed) if policy_file is None else FSMPolicy.load(policy_file, seed=seed)
            self._train_calls_left = (1 if policy_file is None else 0) if train_calls is None else train_calls
        self._kinds: dict = {}                # (cell, tree, signature) -> _Kind
        self._sigs: dict = {}                 # result signatures, one object per value
        self._labels: set = set()
        self._cells: dict = {}                # (kind, in_axes) -> BatchedCell
        self._stats = dict.fromkeys(("instances", "nodes", "batches", "levels", "gather_bytes", "host_gather_bytes",
                                     "arena_bytes", "operands_sliced", "operands_gathered", "operands_indexed",
                                     "rounds"), 0)
        self._stats.update(record_s=0.0, plan_s=0.0, run_s=0.0)

    def __call__(self, instances: Sequence) -> list:
        """``[fn(x) for x in instances]``, the cell calls batched."""
        if isinstance(instances, (str, bytes)) or not hasattr(instances, "__iter__"):
            raise TypeError(f"autobatch: instances must be a list (or other iterable) of instances, "
                            f"got {type(instances).__name__}")
        instances = instances if isinstance(instances, list) else list(instances)
        if _CALL_HOOK:
            raise RuntimeError("autobatch calls do not nest")
        run = _Run(self)
        _CALL_HOOK.append(run.record)
        # thousands of small objects (nodes, lazy values) would trigger the cyclic collector
        # over the whole heap again and again: it waits, and the run leaves no cycles behind
        # (``_Run.release``), so they are freed as the call returns, not left to a collection
        # that walks them all (2 ms of a 23 ms TreeLSTM pass)
        collecting = gc.isenabled()
        gc.disable()
        s = self._stats
        try:
            flushed = s["plan_s"] + s["run_s"]
            t0 = time.perf_counter()
            results = self._drive(run, instances)
            s["record_s"] += time.perf_counter() - t0 - (s["plan_s"] + s["run_s"] - flushed)
            _CALL_HOOK.clear()
            run.flush()
            out = _results(results)
        finally:
            _CALL_HOOK.clear()
            run.release()
            if collecting:
                gc.enable()
        if self._train_calls_left > 0:
            self._train_calls_left -= 1
        self._stats["instances"] += len(instances)
        return out

    def _drive(self, run: _Run, instances: list) -> list:
        """Record ``fn`` on every instance; the results, lazy values among them.  A
        generator (``fn`` a generator function) runs until it yields; then, once every
        instance has yielded or returned (a *round*), one flush runs all that is pending and
        each suspended generator is resumed with its values, round after round."""
        results = [None] * len(instances)
        waiting = []                # (instance, generator, the lazy value or leaves, None or tree)
        s = self._stats
        now: list = []
        try:
            for i, x in enumerate(instances):
                run.starts.append(len(run.pending))
                r = self.fn(x)
                if isinstance(r, GeneratorType):
                    self._step(run, i, r, None, results, waiting)
                else:
                    results[i] = r
            while waiting:
                s["rounds"] += 1
                run.flush()
                now, waiting = waiting, []
                for i, g, y, tree in now:
                    run.starts.append(len(run.pending))
                    if tree is None:          # one lazy value
                        sent = y.force().copy()
                    else:
                        sent = optree.tree_unflatten(tree, [v.force().copy() for v in y])
                    self._step(run, i, g, sent, results, waiting)
        except BaseException:                 # the suspended generators closed (their finally blocks run)
            for _, g, _, _ in now + waiting:
                g.close()
            raise
        return results

    def _step(self, run: _Run, i: int, g: GeneratorType, sent, results: list, waiting: list) -> None:
        """Resume instance ``i``'s generator with ``sent`` (None: start it) up to its next
        yield (it waits) or its return (its result)."""
        try:
            y = g.send(sent)
        except StopIteration as stop:
            results[i] = stop.value
            return
        if type(y) is Lazy and y.run is run:
            waiting.append((i, g, y, None))
            return
        if y is None:
            g.close()
            raise TypeError(f"autobatch: instance {i} yielded None (a bare `yield`?); yield a lazy value "
                            f"(a cell's result) or a pytree of them")
        leaves, tree = optree.tree_flatten(y, none_is_leaf=False)
        for v in leaves:
            if type(v) is not Lazy:
                g.close()
                what = type(v).__name__ if v is y else f"{type(y).__name__} holding a {type(v).__name__}"
                raise TypeError(f"autobatch: instance {i} yielded {what} ({_short(v)}); yield a lazy value "
                                f"(a cell's result) or a pytree of them")
            if v.run is not run:
                g.close()
                raise ValueError(f"autobatch: instance {i} yielded a lazy value of another autobatch call")
        waiting.append((i, g, leaves, tree))

    def stats(self) -> dict:
        """Totals over the calls so far: instances; nodes recorded; batches launched;
        ``levels``, the longest chain of dependent calls in each flush, summed (no policy can
        launch fewer batches: a call runs after the batch computing its input);
        ``gather_bytes``, bytes copied to build batch operands, on the host
        (``host_gather_bytes``: arrays passed to cells stacked, products' operands taken) or
        by a batched cell's program (``operands_gathered`` operands were copied;
        ``operands_sliced`` read as views of an arena; ``operands_indexed`` read through an
        index array by the kernels, their own rows not copied); ``arena_bytes``, results
        copied into the arenas; ``compiles`` of the batched cells (one per cell and argument layout,
        whatever the batch sizes); seconds spent recording (running ``fn``: ``record_s``),
        planning (``plan_s``) and running batches (``run_s``); ``rounds``, the flushes that
        resumed suspended generators (``fn`` a generator function); for the fsm policy,
        ``fsm_states`` in its table, ``fsm_episodes`` trained and ``fsm_fallbacks`` (choices
        left to the agenda's rule: states the table does not hold)."""
        out = dict(self._stats, compiles=sum(f.jitted.cache_info().compiles for f in self._cells.values()))
        if self._fsm is not None:
            out.update(fsm_states=len(self._fsm.policy), fsm_episodes=self._fsm.episodes,
                       fsm_fallbacks=self._fsm.fallbacks)
        return out

    def batched_cells(self) -> list:
        """The batched cells compiled so far, as ``(label, in_axes, modes, jitted)``: the
        kind's label (cell and argument signature), which arguments are batched (0) or
        passed once (None), how each batched one is passed (``"indexed"``: a source array and
        an index array, the take inside the program; ``"plain"``: an array), and the jitted
        function (``jitted.lower(...).as_text("optimized")`` shows where the takes went)."""
        return [(kind.label, in_axes, cell.modes, cell.jitted) for (kind, in_axes), cell in self._cells.items()]

    def save_policy(self, path: str | os.PathLike) -> None:
        """Write the fsm policy's learned table as JSON, for ``rj.autobatch(fn, policy="fsm",
        policy_file=path)`` (which uses it greedily, no training unless ``train_calls``)."""
        if self._fsm is None:
            raise ValueError(f"autobatch: save_policy is for policy='fsm', this one is {self.policy!r}")
        if not self._fsm.policy:
            raise RuntimeError("autobatch: save_policy: nothing learned yet (call the autobatched function "
                               "on some instances first, with train_calls > 0)")
        self._fsm.save(path)

    def _new_kind(self, key: tuple, leaves) -> _Kind:
        """Trace the cell once for a new argument signature: its results' shapes."""
        cell, tree, sig = key
        structs = [_struct_of(x) for x in leaves]
        if tree is None:
            out = cell.eval_shape(*structs)
        else:
            args, kwargs = optree.tree_unflatten(tree, structs)
            out = cell.eval_shape(*args, **kwargs)
        outs, out_tree = optree.tree_flatten(out, none_is_leaf=False)
        label = f"{getattr(cell.fun, '__module__', '')}.{getattr(cell.fun, '__qualname__', cell.__name__)}" \
                f"({', '.join(map(_sig_str, sig))}{'' if tree is None else '; ' + str(tree)})"
        base, n = label, 1
        while label in self._labels:          # two cells of one name: numbered by first call
            n += 1
            label = f"{base}#{n}"
        self._labels.add(label)
        kind = self._kinds[key] = _Kind(cell, tree, len(sig), outs, out_tree, label)
        # one object per signature: a lazy argument matches the signature a cell's last call
        # saw by identity (``_Run.record``)
        kind.out_sigs = [None if s is None else self._sigs.setdefault(s, s) for s in kind.out_sigs]
        return kind


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def autobatch(fn: Callable, policy: str = "depth", *, layout: bool = True, scatter: bool = True,
              policy_file: str | os.PathLike | None = None, train_calls: int | None = None,
              episodes: int = 100, seed: int = 0) -> AutoBatched:
    """``fn`` (one instance in, its result out, calling ``@rj.jit`` cells) over a list of
    instances with the cells' calls batched (see the module's docstring).

    ``policy``: ``"depth"``, ``"agenda"`` or ``"fsm"``.  ``layout``: order each batch's
    results so later operands are slices (False: the policy's order).  ``scatter``: read
    operands through index arrays inside the batched cells where the cell reads them
    elementwise (False: gather every operand on the host first).  For ``"fsm"``:
    ``policy_file``, a table written by ``AutoBatched.save_policy`` to start from;
    ``train_calls``, how many calls train the table (default 1 without a file, 0 with one),
    each flush of such a call replayed for ``episodes`` Q-learning episodes before it runs
    greedily; ``seed`` for the exploration."""
    return AutoBatched(fn, policy, layout=layout, scatter=scatter, policy_file=policy_file,
                       train_calls=train_calls, episodes=episodes, seed=seed)
