"""Fuzzing runs: one hypothesis search (:func:`fuzz`) and long campaigns that record each
distinct failure once (:func:`campaign`)."""
from __future__ import annotations

import hashlib
import os
import textwrap
import time
import traceback

from hypothesis import strategies as st

from .._core import arrays_for
from .check import Failure, check_gradient, check_program, difference_kind, search
from .generate import programs
from .features import FeatureCase, fuzz_features
from .minimize import minimize, reproducer


def fuzz(n_programs: int, *, seed: int | None = None, backends=None, modes=("explicit", "auto"),
         max_ops: int = 30, input_sets: int = 2, database=None, on_program=None, min_ops: int = 1,
         shrink: bool = True, minimize_s: float = 0.0):
    """Run one hypothesis search over ``n_programs`` programs; raises the :class:`Failure` of
    the first failing program, shrunk by hypothesis (``shrink``) and then by
    :func:`minimize` for up to ``minimize_s`` seconds."""
    @st.composite
    def case(draw):
        prog = draw(programs(min_ops=min_ops, max_ops=max_ops))
        sig = prog.signature()
        sets = [draw(arrays_for(sig, min_side=1, max_side=prog.max_side, with_dims=True))
                for _ in range(input_sets)]
        return prog, sets

    try:
        search(case(), lambda c: check_program(c[0], c[1], backends, modes), n_programs, seed=seed,
               database=database, shrink=shrink,
               on_draw=None if on_program is None else lambda c: on_program(c[0]))
    except Failure as f:
        if minimize_s > 0:
            f = minimize(f, minimize_s)
            raise f from f.__cause__
        raise


def fuzz_gradients(n_programs: int, *, seed: int | None = None, backends=None, max_ops: int = 12,
                   input_sets: int = 2, on_program=None) -> None:
    """One hypothesis search over ``n_programs`` float programs whose gradients are compared
    across backends (:func:`check_gradient`); raises the :class:`Failure` of the first
    failing program, shrunk."""
    @st.composite
    def case(draw):
        prog = draw(programs(min_ops=1, max_ops=max_ops, float_only=True))
        sig = prog.signature()
        sets = [draw(arrays_for(sig, min_side=1, max_side=prog.max_side, with_dims=True))
                for _ in range(input_sets)]
        return prog, sets

    search(case(), lambda c: check_gradient(c[0], c[1], backends), n_programs, seed=seed, shrink=True,
           on_draw=None if on_program is None else lambda c: on_program(c[0]))


def _signature_of(f: Failure) -> str:
    """What identifies a bug: target, error type and first line, op kinds involved."""
    cause = f.__cause__
    head = f"{type(cause).__name__}" if cause is not None else "Failure"
    if type(cause) is AssertionError:
        head += ":" + difference_kind(cause)
    else:
        head += ":" + str(cause).split("\n")[0][:80]
    if isinstance(f.program, FeatureCase):
        return f"{f.backend}/feature:{f.program.kind}/{head}"
    kinds = ",".join(sorted({op.kind for op in f.program.ops}))
    return f"{f.backend}/{f.mode}/{head}/{kinds}"


def campaign(n_programs: int, seed: int = 0, out: str = "fuzz-failures", chunk: int = 200,
             time_limit: float | None = None, max_ops: int = 30, log=print, shrink: bool = False,
             minimize_s: float = 60.0, features: bool = False) -> dict:
    """Many searches of ``chunk`` programs (each seeded ``seed + k``) until ``n_programs``
    programs ran; each distinct failure is written to ``out`` as a reproducer script.  With
    ``features``, every other search draws feature cases instead (static arguments,
    captured arrays, kernels with data-dependent indices: :mod:`.features`)."""
    os.makedirs(out, exist_ok=True)
    count = [0]
    kinds = [0]                 # feature cases among the programs
    seen: dict = {}
    t0 = time.time()
    current = os.path.join(out, "_current_program.py")

    def on_program(prog):
        count[0] += 1
        with open(current, "w") as fh:          # survives a crash of the process
            fh.write(str(prog) + "\n")

    def on_feature_case(case):
        kinds[0] += 1
        on_program(case)

    k = 0
    while count[0] < n_programs and (time_limit is None or time.time() - t0 < time_limit):
        todo = min(chunk, n_programs - count[0])
        before = count[0]
        try:
            if features and k % 2 == 1:
                fuzz_features(todo, seed=seed + k, on_case=on_feature_case)
            else:
                fuzz(todo, seed=seed + k, max_ops=max_ops, on_program=on_program, shrink=shrink,
                     minimize_s=minimize_s)
        except Failure as f:
            sig = _signature_of(f)
            seen.setdefault(sig, 0)
            seen[sig] += 1
            if seen[sig] == 1:
                name = "fail_" + hashlib.sha256(sig.encode()).hexdigest()[:10] + ".py"
                with open(os.path.join(out, name), "w") as fh:
                    # (a feature case's message holds its source and inputs)
                    fh.write(reproducer(f) if not isinstance(f.program, FeatureCase)
                             else "# " + str(f).replace("\n", "\n# ") + "\n")
                log(f"[{count[0]} programs, {time.time() - t0:.0f}s] FAILURE {sig} -> {name}\n"
                    + textwrap.indent(str(f).split("\n")[0][:400], "    "))
            else:
                log(f"[{count[0]} programs] again: {sig}")
        except Exception:          # a bug of the fuzzer itself: report, go on
            log("fuzzer error:\n" + traceback.format_exc())
        if count[0] == before:
            break
        k += 1
        log(f"[{count[0]} programs, {time.time() - t0:.0f}s] {len(seen)} distinct failures")
    if os.path.exists(current):
        os.remove(current)
    return {"programs": count[0], "feature_cases": kinds[0], "seconds": time.time() - t0, "failures": seen}
