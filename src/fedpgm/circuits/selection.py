"""LearnSPN's settings chosen on validation data within a wall-time budget.

``default_settings(rows, columns)`` is the starting rule: ``min_instances_slice`` = sqrt(rows)
(at least 10: a slice must stay large enough for its RDC test and k-means to mean anything, and
the number of slices then grows like sqrt(rows)), ``threshold`` 0.3 where there are fewer than 20
rows per column (independence tests are weak there: split variables apart more readily) and 0.1
elsewhere. On the five DEBD sets this gives (126, 0.1) nltcs, (132, 0.1) plants, (122, 0.1)
baudio, (95, 0.1) jester, (40, 0.3) dna; their best grid points were (100, 0.05), (50, 0.1),
(100, 0.05), (100, 0.05), (200, 0.3).

``select_learnspn`` searches around it by successive halving (Jamieson and Talwalkar 2016):
every candidate of a grid (``min_instances_slice`` at 1/2, 1 and 2 times the rule's, thresholds
0.05, 0.1, 0.2, 0.3, and with two or more discrete variables also Chow-Liu-tree leaves,
``fedpgm.circuits.chow_liu``, at 2, 4 and 8 times the rule's slice minimum) is learned on a
quarter of the training rows (its slice minimum scaled with them) and scored on the validation
rows; the best third goes on to half the rows, the best two to all of them, and the best of
those on validation wins. A hopeless candidate is thus stopped after its cheapest fit. The
budget bounds the whole search: no fit starts that would end past it (its time estimated from
the same candidate's last fit, scaled to the rows; at least one fit runs), and if no candidate
reached every row the leader so far is learned on all of them (the one fit allowed to end past
the budget, reported as ``over_budget_s``). Every fit is reported (settings, rows, seconds,
validation log-likelihood).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd

from fedpgm.circuits.estimator import LearnSPN
from fedpgm.circuits.learnspn import LEAF_MODELS
from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError

SELECTIONS = ("validation",)  # what settings are chosen on (the CLI's --select)
THRESHOLDS = (0.05, 0.1, 0.2, 0.3)
MIN_SCALES = (0.5, 1.0, 2.0)
TREE_MIN_SCALES = (2.0, 4.0, 8.0)  # Chow-Liu leaves pay off on larger slices (fewer, better-estimated trees)
RUNGS = (0.25, 0.5, 1.0)  # fraction of the training rows per rung
KEEP_AFTER_FIRST = 1 / 3  # share of candidates kept after rung 0; after rung 1, two


def default_settings(rows: int, columns: int) -> dict:
    """The starting rule (module doc): {"min_instances_slice", "threshold"}."""
    return {"min_instances_slice": max(10, round(math.sqrt(rows))),
            "threshold": 0.3 if rows < 20 * columns else 0.1}


def candidates(rows: int, columns: int, discrete: int = 0) -> list[dict]:
    """The grid around the starting rule; with ``discrete`` >= 2 variables, each point with both
    leaf models."""
    base = default_settings(rows, columns)["min_instances_slice"]
    scales = {"univariate": MIN_SCALES, "chow-liu": TREE_MIN_SCALES}
    models = LEAF_MODELS if discrete >= 2 else LEAF_MODELS[:1]
    return [{"min_instances_slice": m, "threshold": t, "leaf_model": lm} for lm in models
            for m in sorted({max(10, round(base * s)) for s in scales[lm]}) for t in THRESHOLDS]


def select_learnspn(train: pd.DataFrame, valid: pd.DataFrame, schema: Schema, budget_s: float = 120.0,
                    seed: int = 0, **learner) -> tuple[LearnSPN, dict]:
    """The best LearnSPN on ``valid`` (module doc): (model fitted on all of ``train``, report).
    ``learner``: further LearnSPN parameters (leaf, precision, ...), the same for every fit."""
    if not budget_s > 0:
        raise FedpgmError(f"the selection budget must be positive seconds, got {budget_s}")
    searched = sorted(set(learner) & {"min_instances_slice", "threshold", "leaf_model"})
    if searched:
        raise FedpgmError(f"{searched} are what the selection searches; leave them out of the fixed settings")
    if len(valid) == 0:
        raise FedpgmError("selection needs validation rows; give the dataset a validation split")
    start = time.perf_counter()
    order = np.random.default_rng(seed).permutation(len(train))
    tried: list[dict] = []
    alive = candidates(len(train), len(schema), sum(f.discrete for f in schema.features))
    leader = None  # (validation score, settings): the best of the last rung run
    final = None  # (validation score, settings, model) of the best fit on every row
    cost: dict = {}  # settings -> seconds of its last fit, per row
    for rung, fraction in enumerate(RUNGS):
        rows = np.sort(order[: max(2, round(fraction * len(train)))])  # (in the data's order)
        scored: list[tuple[float, dict]] = []
        for c in alive:
            expected = cost.get(tuple(c.items()), 0.0) * len(rows)  # its last fit, scaled to these rows
            if (scored or leader is not None) and time.perf_counter() - start + expected > budget_s:
                break  # no time for it: the leader goes to the final fit
            scaled = {**c, "min_instances_slice": max(2, round(c["min_instances_slice"] * fraction))}
            t0 = time.perf_counter()
            model = LearnSPN(**scaled, seed=seed, **learner).fit(train.iloc[rows], schema)
            score = model.score(valid)
            seconds = time.perf_counter() - t0
            cost[tuple(c.items())] = seconds / len(rows)
            tried.append({**c, "rows": len(rows), "seconds": seconds, "valid_loglik": score})
            scored.append((score, c))
            if fraction == 1.0 and (final is None or score > final[0]):
                final = (score, c, model)
        if not scored:
            break
        scored.sort(key=lambda t: -t[0])
        leader = scored[0]
        alive = [c for _, c in scored[: max(1, round(len(scored) * KEEP_AFTER_FIRST)) if rung == 0 else 2]]
        if time.perf_counter() - start > budget_s:
            break
    if final is None:  # the budget ended before any fit on every row: learn the leader on them
        assert leader is not None  # (the first candidate is always fitted)
        t0 = time.perf_counter()
        model = LearnSPN(**leader[1], seed=seed, **learner).fit(train, schema)
        final = (model.score(valid), leader[1], model)
        tried.append({**leader[1], "rows": len(train), "seconds": time.perf_counter() - t0, "valid_loglik": final[0]})
    elapsed = time.perf_counter() - start
    report = {"chosen": final[1], "valid_loglik": final[0], "default": default_settings(len(train), len(schema)),
              "tried": tried, "budget_s": budget_s, "seconds": elapsed, "over_budget_s": max(0.0, elapsed - budget_s)}
    return final[2], report
