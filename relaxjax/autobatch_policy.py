"""``rj.autobatch``'s scheduling: which pending nodes run together, in which order, and in
which order each batch stores its results (ED-Batch's memory layout).

Scheduling needs only the graph's structure, never a value, so every policy plans a whole
flush before anything runs, and the FSM policy can learn by replaying a flush's graph as
many times as it likes (an episode costs a pass over the edges, no kernel).  The graph comes
as integers (:class:`Graph`): a node's *type* (its cell, argument signature and weights:
the nodes one batch may hold), its users and the producers it waits for.

Policies (each batch takes nodes of one type):

* ``depth`` (ACRoBat, TensorFlow Fold): the nodes of one depth, type by type, depth by depth;
* ``agenda`` (DyNet): among the types with ready nodes, the one with the most, all of them;
* ``fsm`` (ED-Batch, Chen et al., ICML 2023): a table from the frontier's state (its
  types, most ready nodes first, and the type launched last) to the type to run next,
  learned on the first calls' graphs by tabular Q-learning (reward -1 per batch, an
  episode = one flush's graph, gamma 1, so a Q-value estimates minus the batches still to
  launch), its choices kept where a replay of the graph confirms them
  (:class:`FSMPolicy`), then taken greedily.  A state never seen falls back on the
  agenda's choice.

Running *all* ready nodes of the chosen type loses nothing: for any schedule, the one that
runs the same sequence of types, each time every ready node of the type, has computed at
least as much after each step, so it finishes in no more batches.

Layout (:func:`order_for_layout`): batches are laid out in the arena in execution order, so
the order of nodes inside each batch decides where results land.  Going backwards, a batch
is sorted by where its nodes are first consumed (consumer batch, argument position,
consumer's position): the nodes that one later batch reads at one argument then sit
contiguously and in that batch's order, so its operand is a slice of the arena (a chain's
next step reads a prefix of the last step's results) instead of a gather.
"""
from __future__ import annotations

import json
import os
import random
from itertools import groupby
from typing import Sequence

__all__ = ["Graph", "POLICIES", "schedule_depth", "schedule_agenda", "FSMPolicy", "order_for_layout"]

POLICIES = ("depth", "agenda", "fsm")
FORMAT = "relaxjax.autobatch.fsm"
LARGEST = "<largest>"            # the fsm's action "the type with the most ready nodes"


class Graph:
    """A flush's pending nodes as integers: ``type_of[i]`` (an index into ``labels``),
    ``depth[i]``, ``users[i]`` (one entry per edge: a node reading two results of i is
    listed twice), ``waits[i]`` (the number of such edges into i), ``ins[i]`` (the edges into
    i as (argument position, producer))."""
    __slots__ = ("type_of", "depth", "ins", "labels", "width", "_users", "_waits")

    def __init__(self, type_of: list, depth: list, ins: list, labels: list, width: int | None = None):
        self.type_of, self.depth, self.ins, self.labels = type_of, depth, ins, labels
        # more than any argument position in ``ins`` (the nodes' largest arity); None: found
        self.width = width
        self._users = self._waits = None

    def _edges(self) -> None:
        users: list = [[] for _ in self.type_of]
        waits = [0] * len(self.type_of)
        for i, edges in enumerate(self.ins):
            if edges:
                waits[i] = len(edges)
                for _, p in edges:
                    users[p].append(i)
        self._users, self._waits = users, waits

    @property
    def users(self) -> list:
        if self._users is None:
            self._edges()
        return self._users

    @property
    def waits(self) -> list:
        if self._waits is None:
            self._edges()
        return self._waits


def schedule_depth(g: Graph) -> list:
    """Depth by depth, one batch per type present at that depth (a node's producers are all
    shallower, so each batch is ready when it comes).  Nodes keep their recording order
    within a batch (the sort is stable)."""
    types = len(g.labels)
    keys = [d * types + t for d, t in zip(g.depth, g.type_of)]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return [list(group) for _, group in groupby(order, keys.__getitem__)]


def _initial(g: Graph):
    ready: list = [[] for _ in g.labels]
    for i, w in enumerate(g.waits):
        if w == 0:
            ready[g.type_of[i]].append(i)
    return ready, {t for t, r in enumerate(ready) if r}


def _launch(g: Graph, ready: list, nonempty: set, wait: list, t: int) -> list:
    """Run every ready node of type t (structurally): the batch, and its users made ready."""
    batch = ready[t]
    ready[t] = []
    nonempty.discard(t)
    users, type_of = g.users, g.type_of
    for i in batch:
        for u in users[i]:
            w = wait[u] - 1
            wait[u] = w
            if w == 0:
                tu = type_of[u]
                ready[tu].append(u)
                nonempty.add(tu)
    return batch


def _largest(ready: list, nonempty: set) -> int:
    """The agenda's choice: the type with the most ready nodes (the first such type on ties)."""
    return min(nonempty, key=lambda t: (-len(ready[t]), t))


def schedule_agenda(g: Graph) -> list:
    ready, nonempty = _initial(g)
    wait = list(g.waits)
    batches = []
    while nonempty:
        batches.append(_launch(g, ready, nonempty, wait, _largest(ready, nonempty)))
    return batches


class FSMPolicy:
    """ED-Batch's learned policy, a finite-state machine over frontier states.

    A state is the frontier's types, most ready nodes first (ED-Batch's set of types,
    ordered), and the type launched last (the machine's memory); types are named by their
    labels (a cell's name and argument signature, see ``rj.autobatch``), so a table
    learned in one process serves another.  An action is a type of the frontier, or
    ``LARGEST``: the type with the most ready nodes, the agenda's choice.  Why not the set
    alone: measured on the lattice workload (64 lattices of ``examples/autobatch_models``,
    hidden 8, seed 0; agenda 79 batches, depth 122), Q-learning's table over sets launched
    175, and no table over sets, ``LARGEST`` included, beats 79 (all 108 tried); over
    (set, last type) 76, over (ordered set, last type) 75; on the benchmark's lattices
    (hidden 128) 102 and 98 against the agenda's 102.  ``train`` learns on a flush's graph
    in two stages:

    1. tabular Q-learning (``q``: state -> {action: Q}), epsilon-greedy episodes;
    2. extraction (``policy``: state -> action): the best, replayed on the graph, of the
       agenda (``LARGEST`` everywhere), the table so far and the Q-greedy table;
       then, a local search: each other action of each state the replay visits is tried, one
       at a time, in order of Q-advantage over the table's, kept when the replay launches
       fewer batches, until none helps (at most ``max_tries`` replays).  The
       Q-values are estimates over aliased states (one state stands for many frontiers), so
       the replay has the last word: on the graph it last trained on, the table never
       launches more batches than the agenda.

    ``schedule`` follows ``policy``; a state it does not hold, or an action whose type is
    not on the frontier, falls back on the agenda's choice (counted in ``fallbacks``)."""

    def __init__(self, alpha: float = 0.2, seed: int = 0):
        self.q: dict = {}                     # state (ranked labels, last label) -> {action: Q}
        self.policy: dict = {}                # state -> label
        self.alpha = alpha
        self.episodes = 0                     # trained so far
        self.fallbacks = 0                    # choices made by the agenda rule
        self._rng = random.Random(seed)

    @staticmethod
    def key(ready: list, nonempty: set, labels: list, last: str | None) -> tuple:
        """The state: (the frontier's types' labels, most ready nodes first, ties by label;
        the last type's label)."""
        return tuple([lab for _, lab in sorted([(-len(ready[t]), labels[t]) for t in nonempty])]), last

    @staticmethod
    def _act(a: str, ready: list, nonempty: set, labels: list):
        """The type action ``a`` runs (None: its type is not on the frontier)."""
        if a == LARGEST:
            return _largest(ready, nonempty)
        return next((u for u in nonempty if labels[u] == a), None)

    def _replay(self, g: Graph, table: dict, count_fallbacks: bool = False):
        """The schedule ``table`` gives on ``g`` and the states it went through."""
        ready, nonempty = _initial(g)
        wait = list(g.waits)
        labels = g.labels
        batches, seen, last = [], [], None
        while nonempty:
            state = self.key(ready, nonempty, labels, last)
            seen.append((state, sorted([labels[u] for u in nonempty])))
            a = table.get(state)
            t = None if a is None else self._act(a, ready, nonempty, labels)
            if t is None:
                if count_fallbacks:
                    self.fallbacks += 1
                t = _largest(ready, nonempty)
            batches.append(_launch(g, ready, nonempty, wait, t))
            last = labels[t]
        return batches, seen

    def schedule(self, g: Graph) -> list:
        return self._replay(g, self.policy, True)[0]

    def train(self, g: Graph, episodes: int) -> list:
        """Q-learning on ``g`` (epsilon from 0.5 down to 0.02 over the episodes), then the
        extraction (see the class docstring); returns each episode's batch count."""
        labels, q, alpha, rng = g.labels, self.q, self.alpha, self._rng
        counts = []
        for e in range(episodes):
            eps = 0.02 + 0.48 * (1 - e / max(1, episodes - 1))
            ready, nonempty = _initial(g)
            wait = list(g.waits)
            state = self.key(ready, nonempty, labels, None)
            steps = 0
            while nonempty:
                row = q.setdefault(state, {})
                actions = sorted([labels[u] for u in nonempty]) + [LARGEST]
                if rng.random() < eps:
                    a = actions[rng.randrange(len(actions))]
                else:   # untried actions count 0 (rewards are negative: optimistic); ties: agenda
                    a = max(reversed(actions), key=lambda b: row.get(b, 0.0))
                t = self._act(a, ready, nonempty, labels)
                _launch(g, ready, nonempty, wait, t)
                steps += 1
                if nonempty:
                    nxt = self.key(ready, nonempty, labels, labels[t])
                    nrow = q.get(nxt, {})
                    target = -1.0 + max(max(nrow.get(labels[u], 0.0) for u in nonempty), nrow.get(LARGEST, 0.0))
                else:
                    nxt, target = None, -1.0
                old = row.get(a, 0.0)
                row[a] = old + alpha * (target - old)
                state = nxt
            counts.append(steps)
        self.episodes += episodes
        self._extract(g)
        return counts


    def _extract(self, g: Graph, max_tries: int = 150) -> None:
        """The table: the best of the agenda, the table so far and the Q-greedy table on
        ``g``, then improved by single changes while they save batches on ``g``."""
        q = self.q

        def score(table):
            batches, seen = self._replay(g, table)
            return len(batches), seen

        greedy = {s: max(row, key=lambda a: (row[a], a == LARGEST)) for s, row in q.items() if row}
        table, (best, seen) = {}, score({})               # the agenda
        for start in (self.policy, greedy):
            trial, trial_seen = score(start)
            if trial < best:
                table, best, seen = dict(start), trial, trial_seen
        tries = 0
        improved = True
        while improved and tries < max_tries:
            improved = False
            candidates = []
            frontiers = {}
            for s, frontier in seen:                      # visited states, in order
                frontiers.setdefault(s, frontier)
            for s, frontier in frontiers.items():
                row = q.get(s, {})
                cur = table.get(s, LARGEST)
                here = row.get(cur, 0.0)
                for a in frontier + [LARGEST]:
                    if a != cur:
                        candidates.append((row.get(a, float("-inf")) - here, s, a))
            candidates.sort(key=lambda c: -c[0])          # the most promising by Q first
            for _, s, a in candidates[:max_tries - tries]:
                tries += 1
                t2 = dict(table)
                t2[s] = a
                trial, trial_seen = score(t2)
                if trial < best:
                    table, best, seen, improved = t2, trial, trial_seen, True
                    break
        for s, _ in seen:                                 # the agenda's choices, written down
            table.setdefault(s, LARGEST)
        self.policy = table

    # ---------------------------------------------------------------- saving and loading
    def to_json(self) -> dict:
        def state_list(d):
            return sorted(([list(s), last, v] for (s, last), v in d.items()),
                          key=lambda e: (len(e[0]), e[0], e[1] or ""))
        return {"format": FORMAT, "version": 1, "episodes": self.episodes,
                "policy": state_list(self.policy),
                "q": state_list({s: dict(sorted(row.items())) for s, row in self.q.items()})}

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f, indent=1)

    @classmethod
    def load(cls, path: str | os.PathLike, alpha: float = 0.2, seed: int = 0) -> "FSMPolicy":
        name = repr(os.fspath(path))
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"autobatch: policy_file {name} cannot be read as JSON: {e}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != 1:
            raise ValueError(f"autobatch: policy_file {name} is not an autobatch FSM table "
                             f"(format {FORMAT!r}, version 1: written by AutoBatched.save_policy)")
        p = cls(alpha, seed)
        try:
            for state, last, action in data["policy"]:
                if not all(isinstance(x, str) for x in state) or not isinstance(last, (str, type(None))) \
                        or not isinstance(action, str):
                    raise TypeError
                p.policy[tuple(state), last] = action
            for state, last, row in data["q"]:
                if not all(isinstance(x, str) for x in state) or not isinstance(last, (str, type(None))) \
                        or not all(isinstance(a, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
                                   for a, v in row.items()):
                    raise TypeError
                p.q[tuple(state), last] = {a: float(v) for a, v in row.items()}
            p.episodes = int(data["episodes"])
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ValueError(f"autobatch: policy_file {name}: malformed (\"policy\": [[frontier labels, last "
                             f"label or null, action], ...], \"q\": [[frontier labels, last label or null, "
                             f"{{action: Q}}], ...])") from None
        return p


def order_for_layout(g: Graph, batches: Sequence[list]) -> None:
    """Sort each batch (in place) by where its nodes are first read: (consumer batch,
    argument position, consumer's position), nodes nobody reads last; see the module's
    docstring.  Batches are visited last to first, so a consumer's order is fixed before its
    producers are sorted by it.  (The key is that triple packed into one int: no tuple per
    edge.)"""
    n = len(g.type_of)
    ins = g.ins
    width = g.width
    if width is None:
        width = 1 + max((k for edges in ins if edges for k, _ in edges), default=0)
    last = len(batches) * width * n
    key: list = [last] * n
    for bi in range(len(batches) - 1, -1, -1):
        batch = batches[bi]
        if len(batch) > 1:
            batch.sort(key=key.__getitem__)
        base = bi * width
        for pos, c in enumerate(batch):
            edges = ins[c]
            if edges:
                for k, p in edges:
                    kk = (base + k) * n + pos
                    if kk < key[p]:
                        key[p] = kk
