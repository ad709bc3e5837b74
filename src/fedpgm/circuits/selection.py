"""LearnSPN's settings chosen on validation data within a wall-time budget.

``default_settings(rows, columns)`` is the starting rule: ``min_instances_slice`` = sqrt(rows)
(at least 10: a slice must stay large enough for its RDC test and k-means to mean anything, and
the number of slices then grows like sqrt(rows)), ``threshold`` 0.3 where there are fewer than 20
rows per column (independence tests are weak there: split variables apart more readily) and 0.1
elsewhere; the leaves' pseudo-count ``alpha`` 0.1 and two parts per row split. On the five DEBD
sets this gives (126, 0.1) nltcs, (132, 0.1) plants, (122, 0.1) baudio, (95, 0.1) jester,
(40, 0.3) dna; their best grid points were (100, 0.05), (50, 0.1), (100, 0.05), (100, 0.05),
(200, 0.3).

``select_learnspn`` searches around it in three stages, every fit scored on the validation rows:

1. *Structure*, by successive halving (Jamieson and Talwalkar 2016): every candidate of a grid
   (``min_instances_slice`` at 1/2, 1 and 2 times the rule's, thresholds 0.05, 0.1, 0.2, 0.3, and
   with two or more discrete variables also Chow-Liu forests, ``fedpgm.circuits.chow_liu``,
   at 1, 2, 4 and 8 times the rule's slice minimum) is learned on a quarter of the training rows
   (a univariate candidate's slice minimum scaled with them, so its structure keeps its shape; a
   forest's not, since its pairwise counts need the slice's rows: on plants, scaled forests of
   33 rows scored -14.5 on the first rung and lost to larger ones that the full rows rank below
   them); the best third goes on to half the rows, the best two to all of them. A hopeless
   candidate is thus stopped after its cheapest fit. This stage may use ``SEARCH_SHARE`` of the
   budget.
2. *Smoothing and splits*, one setting at a time from the winner on all rows: the pseudo-count
   ``alpha`` at each of ``ALPHAS``, then ``row_clusters`` at each of ``CLUSTERS``; a value is kept
   where it scores higher, and while the largest value keeps winning the search goes on past
   it (alpha times 4, one cluster more).
3. *Parameters*: EM passes (``fedpgm.circuits.em``) over the training rows, on the winner of
   stages 1 and 2 (batch EM) and, with two or more discrete variables, on a latent tree (stage
   4), one pass at a time. Each model stops when its validation score has not risen for its
   patience (1 pass for the winner, ``LATENT_PATIENCE`` for the latent tree) and its passes
   after the best are undone; ``em_iterations`` reports how many were kept.
4. *A latent tree*: the whole table as one latent Chow-Liu tree (``fedpgm.circuits.latent_tree``),
   trained by passes of stepwise EM over mini-batches (``latent_batch``). Its hidden states per
   variable (``latent_states``) are as many as the data and the time left allow: a probe pass
   over ``PROBE_BATCHES`` mini-batches of a tree with ``LATENT_STATES`` times the E-step on this
   machine (reported as ``latent_probe``). On nltcs more states won at the same passes (mixture
   test -6.0020 with 12 states, -5.9993 with 32 and -5.9968 with 48 after 30 passes). A latent
   tree is a different kind of model, not a point of stage 1's grid: without EM it is a blurred
   Chow-Liu tree and would lose every comparison before its passes. With a latent tree, stages 1
   and 2 keep to ``1 - TRAINING_SHARE`` of the budget, and the two models' passes share the rest
   greedily: the next pass goes to the model whose last pass raised the validation score of
   their mixture (stage 5) most per second (a first pass to each), so time flows to whichever
   model still improves what is chosen. On DEBD's plants, where the latent tree adds little, the
   LearnSPN gets most passes; on dna, where the latent tree carries the mixture, it does.
5. *A mixture* of the two trained models (``LearnSPNMixture``), its one weight the best for the
   validation rows (``mixture_weight``); chosen where it validates highest. The two kinds of
   model err on different rows: on DEBD's baudio a mixture of LearnSPN (test -40.025) and a
   latent tree after 12 passes (-40.764) tested at -39.837. The validation score it reports has
   had that one weight fitted to it.

The budget bounds the whole search, the final fit included: no fit or EM pass starts that would
end past its stage's share (a fit's time predicted from its seconds per row, as the same
candidate's last fit took, else as the slowest fit yet took, a fit's time growing with rows x
columns and the columns fixed; a pass's from the slowest pass of the same model), the first fit,
and where no candidate reached every row the leader's fit on all of them, run whatever the
prediction (the leader's, predicted to end past the budget, unsplit: independent leaves), and
every fit stops splitting at a deadline (``learn_spn``'s ``deadline``: the slices left end in
independent leaves), its share's end less twice the slowest compiling and scoring of a fit yet
(what the stopped fit still has to do), and every EM step at the budget's end less twice what may
follow it: the slowest tail of its model's passes (compiling, scoring, keeping the best; before
the first, its fit's compile and score) and, with two models, compiling their mixture (taken as
long as both tails). A pass's model goes back to its best pass without compiling (the best pass's
compiled circuit is kept), and stage 4's probe pass stops at the deadline too (then no latent
tree). On a 1,000-column binary table (1,800 rows, 30 s budget) the search ended 902 s past its
budget before (a first fit of 218 s on a quarter of the rows, then 715 s on all of them). The
seconds past the budget are reported as ``over_budget_s``, and a fit stopped at its deadline as
``stopped``.
Every fit and EM pass is reported (settings, rows, seconds, validation log-likelihood; a pass also
with the mixture's validation score after it and its rise per second), and ``LearnSPN(**chosen)``
refits the chosen model (``LearnSPNMixture(**chosen)`` where stage 5 chose a mixture; a stopped
fit's structure is not what a refit without the deadline learns).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import pandas as pd
from fedpgm.params import Interval

from fedpgm.circuits.compiled import CompiledCircuit
from fedpgm.circuits.estimator import CircuitEstimator, LearnSPN, LearnSPNMixture, as_matrix
from fedpgm.circuits.latent_tree import LATENT_STATES
from fedpgm.circuits.leaves import ALPHA
from fedpgm.circuits.weighted import MIN_STD_FRACTION, std_floors
from fedpgm.circuits.structure import Circuit
from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError

Fitted = LearnSPN | LearnSPNMixture  # what the selection returns
Scored = tuple[float, dict, LearnSPN, np.ndarray]  # a fit: validation score, settings, model, (valid rows,) scores
SELECTIONS = ("validation",)  # what settings are chosen on (the CLI's --select)
THRESHOLDS = (0.05, 0.1, 0.2, 0.3)
MIN_SCALES = (0.5, 1.0, 2.0)
TREE_MIN_SCALES = (1.0, 2.0, 4.0, 8.0)  # Chow-Liu forests: BIC prunes small slices' trees, larger ones keep more edges
RUNGS = (0.25, 0.5, 1.0)  # fraction of the training rows per rung
KEEP_AFTER_FIRST = 1 / 3  # share of candidates kept after rung 0; after rung 1, two
SEARCH_SHARE = 0.6  # share of the budget the structure search may use (stages 2 and 3 get the rest)
ALPHAS = (0.01, 0.5, 2.0)  # pseudo-counts tried beside the rule's ALPHA
CLUSTERS = (3,)  # parts per row split tried beside 2
EM_MAX = 200  # EM passes at most (the budget and the validation score usually stop it first)
BEYOND = {"alpha": (ALPHAS, lambda a: 4 * a), "row_clusters": (CLUSTERS, lambda k: k + 1)}  # stage 2: grid, next
TRAINING_SHARE = 0.35  # share of the budget kept for stages 3 and 4's passes (with a latent tree)
LATENT_PATIENCE = 4  # a latent tree's passes stop after this many without a higher validation score
# (stepwise EM's validation score wanders by 0.003-0.005 nats/row from pass to pass on nltcs)
LATENT_PASSES = 25  # passes a latent tree is planned for (nltcs, jester and dna's trees rose for 20-35)
CELLS_PER_WEIGHT = 10  # data cells (rows x variables) per transition weight of a latent tree, at least
PROBE_BATCHES = 4  # mini-batches of stage 4's probe pass
SEARCHED = ("min_instances_slice", "threshold", "leaf_model", "alpha", "row_clusters", "em_iterations",
            "latent_states", "em_batch_size")


def mixture_weight(a: np.ndarray, b: np.ndarray, steps: int = 500, tol: float = 1e-10) -> float:
    """The weight w in [1e-6, 1 - 1e-6] maximising mean log(w e^a + (1 - w) e^b) over the rows
    (a, b: (rows,) two models' log-likelihoods): EM on the one weight (w = the mean responsibility
    of a), which climbs this concave objective monotonically."""
    w = 0.5
    for _ in range(steps):
        new = float(np.clip(np.mean(1.0 / (1.0 + np.exp(np.log1p(-w) + b - np.log(w) - a))), 1e-6, 1 - 1e-6))
        if abs(new - w) < tol:
            return new
        w = new
    return w


def latent_batch(rows: int) -> int:
    """Stage 4's mini-batch: a sixteenth of the rows, within 64 to 512."""
    return max(64, min(512, rows // 16))


def latent_states(rows: int, variables: int, least: int, pass_seconds: float, seconds_left: float) -> int:
    """Stage 4's hidden states per variable: the most that keep ``CELLS_PER_WEIGHT`` data cells per
    transition weight ((variables - 1) states^2 of them: the one-in-ten rule of thumb for
    parameters per observation) and let ``LATENT_PASSES`` passes end within ``seconds_left``, a
    pass taking ``pass_seconds`` at ``LATENT_STATES`` states and growing as states^2 (its sum
    edges); at least ``least`` (the variables' largest cardinality, so that the start can stand
    for every observed state)."""
    by_data = math.sqrt(rows * variables / (CELLS_PER_WEIGHT * max(variables - 1, 1)))
    by_time = LATENT_STATES * math.sqrt(max(seconds_left, 0.0) / (LATENT_PASSES * pass_seconds))
    return max(least, math.floor(min(by_data, by_time)))


@dataclass
class Training:
    """One model of stages 3 and 4 trained pass by pass: its best validation ``score`` so far, the
    circuit, its compiled form and the per-row validation log-likelihoods (``rows``, (valid rows,))
    that scored it, the passes ``done`` and ``kept``, a pass's expected ``seconds`` (the slowest
    yet; before the first, an estimate), its ``tail`` (the slowest work after a pass's EM step:
    compiling, scoring, keeping the best, the combined score; at least the fit's compile and
    score) and
    ``rate``, the combined validation score's rise per second of its last pass."""
    score: float
    settings: dict
    model: LearnSPN
    patience: int
    seconds: float
    tail: float
    rows: np.ndarray
    best: Circuit | None = None
    best_compiled: CompiledCircuit | None = None
    done: int = 0
    kept: int = 0
    rate: float = math.inf

    def open(self, most: int) -> bool:
        """Whether it may run another pass (``most`` passes at most)."""
        return self.done < most and self.done - self.kept < self.patience

    def undo(self) -> None:
        """Back to the best pass's circuit, compiled as it was then (so undoing costs no time)."""
        assert self.best is not None and self.best_compiled is not None  # (kept before the first pass)
        self.model.circuit_, self.model.compiled_ = self.best, self.best_compiled

    def result(self) -> tuple[float, dict, LearnSPN]:
        """(score, settings with ``em_iterations``, model) at its best pass."""
        if self.kept < self.done:  # (the passes after the best are undone)
            self.undo()
        self.model.set_params(em_iterations=self.kept)
        return self.score, {**self.settings, "em_iterations": self.kept}, self.model


def grown(params: dict, frame: pd.DataFrame, schema: Schema, floors: np.ndarray | None, deadline: float) -> Circuit:
    """The circuit ``LearnSPN(**params)`` learns on ``frame`` before any EM pass, no slice split
    past ``deadline`` (a ``time.perf_counter()`` time)."""
    m = LearnSPN(**params).check_params()
    X = as_matrix(frame, schema)
    return m.structure(schema, X, std_floors(X, m.min_std_fraction) if floors is None else floors, deadline)


def default_settings(rows: int, columns: int) -> dict:
    """The starting rule (module doc): {"min_instances_slice", "threshold", "alpha", "row_clusters"}."""
    return {"min_instances_slice": max(10, round(math.sqrt(rows))),
            "threshold": 0.3 if rows < 20 * columns else 0.1, "alpha": ALPHA, "row_clusters": 2}


def candidates(rows: int, columns: int, discrete: int = 0) -> list[dict]:
    """The grid around the starting rule; with ``discrete`` >= 2 variables, each point with both
    leaf models."""
    base = default_settings(rows, columns)["min_instances_slice"]
    scales = {"univariate": MIN_SCALES, "chow-liu": TREE_MIN_SCALES}
    models = list(scales) if discrete >= 2 else ["univariate"]  # (latent trees: stage 4)
    return [{"min_instances_slice": m, "threshold": t, "leaf_model": lm, "alpha": ALPHA, "row_clusters": 2}
            for lm in models for m in sorted({max(10, round(base * s)) for s in scales[lm]}) for t in THRESHOLDS]


def select_learnspn(train: pd.DataFrame, valid: pd.DataFrame, schema: Schema, budget_s: float = 120.0,
                    seed: int = 0, min_instances_floor: int = 1, floors: np.ndarray | None = None,
                    max_em_iterations: int | None = None, **learner) -> tuple[Fitted, dict]:
    """The best LearnSPN on ``valid`` (module doc): (model fitted on all of ``train``, report).
    ``learner``: further LearnSPN parameters (leaf, precision, ...), the same for every fit; no
    candidate's slice minimum lies below ``min_instances_floor`` (a FedPC client's policy) on
    all rows; ``floors``: continuous leaves' least stds (``LearnSPN.fit``); ``max_em_iterations``:
    stage 3's passes at most (default ``EM_MAX``; 0 skips it)."""
    if not budget_s > 0:
        raise FedpgmError(f"the selection budget must be positive seconds, got {budget_s}")
    searched = sorted(set(learner) & set(SEARCHED))
    if searched:
        raise FedpgmError(f"{searched} are what the selection searches; leave them out of the fixed settings")
    if len(valid) == 0:
        raise FedpgmError("selection needs validation rows; give the dataset a validation split")
    if list(valid.columns) != list(train.columns):
        lack = [c for c in train.columns if c not in valid.columns][:5]
        extra = [c for c in valid.columns if c not in train.columns][:5]
        raise FedpgmError(f"the validation rows' columns are not the training rows' (missing {lack}, extra {extra}, "
                          "or in another order); give both the same columns in the same order")
    start = time.perf_counter()
    tried: list[dict] = []

    def deadline(limit: float) -> float:
        """When a fit that must end ``limit`` s into the search stops splitting (module doc)."""
        return start + limit - 2 * max((t.get("finish_seconds", 0.0) for t in tried), default=0.0)

    def fit(settings: dict, rows: np.ndarray, limit: float) -> Scored:
        """One fit on ``train``'s ``rows`` (a univariate candidate's slice minimum scaled with them:
        module doc) that ends ``limit`` s into the search, recorded in ``tried`` with the slice
        minimum it used (``fitted_min``): (validation score, settings, model, its (valid rows,)
        log-likelihoods)."""
        share = 1.0 if settings["leaf_model"] != "univariate" else len(rows) / len(train)
        params = {**settings, "min_instances_slice": max(2, round(settings["min_instances_slice"] * share)),
                  "seed": seed, **learner}
        t0, stop = time.perf_counter(), deadline(limit)
        circuit = grown(params, train.iloc[rows], schema, floors, stop)
        t1 = time.perf_counter()
        model = LearnSPN.from_circuit(circuit, {"estimator": "LearnSPN", "params": params})
        per_row = model.score_samples(valid)
        score = float(per_row.mean())
        t2 = time.perf_counter()
        tried.append({**settings, "rows": len(rows), "fitted_min": params["min_instances_slice"], "seconds": t2 - t0,
                      "finish_seconds": t2 - t1, "valid_loglik": score, **({"stopped": True} if t1 > stop else {})})
        return score, settings, model, per_row

    def affordable(settings: dict, rows: int, limit: float) -> bool:
        """Whether a fit of ``settings`` on ``rows`` rows ends ``limit`` s into the search, timed by
        the same settings' last fit, else by the slowest fit yet (per row)."""
        fits = [t for t in tried if "em_iterations" not in t]
        same = [t["seconds"] / t["rows"] for t in fits if all(t.get(k) == v for k, v in settings.items())]
        rate = same[-1] if same else max((t["seconds"] / t["rows"] for t in fits), default=0.0)
        return time.perf_counter() - start + rate * rows <= limit

    def mixed(a: Training, b: Training) -> tuple[float, float]:
        """(validation score, weight of ``a``) of the two models' best passes mixed by the
        validation rows' best weight (``mixture_weight``)."""
        w = mixture_weight(a.rows, b.rows)
        return float(np.logaddexp(np.log(w) + a.rows, np.log1p(-w) + b.rows).mean()), w

    def mixture(a: Training, b: Training) -> tuple[float, dict, Fitted]:
        """Stage 5: the mixture of two trained models."""
        score, w = mixed(a, b)
        fixed = {k: learner[k] for k in ("leaf", "precision", "min_std_fraction") if k in learner}
        model = LearnSPNMixture.of([a.model, b.model], [w, 1.0 - w], seed=seed, **fixed)
        return score, {"components": [a.model.get_params(), b.model.get_params()], "weights": [w, 1.0 - w]}, model

    def combined(runs: list[Training]) -> float:
        """The validation score of the best passes' mixture (of the one model, if only one)."""
        return runs[0].score if len(runs) == 1 else mixed(*runs)[0]

    def training(fitted: Scored, patience: int, seconds: float, tail: float) -> Training:
        """A fitted model (``fit``) ready for its passes."""
        score, settings, model, per_row = fitted
        best = copy.deepcopy(model.circuit_)
        model.compiled_.circuit = best  # (what it compiled, not the circuit EM will change in place)
        return Training(score, settings, model, patience, seconds, tail, per_row, best, model.compiled_)

    def em_pass(run: Training, X: np.ndarray, lows: np.ndarray, deadline: float) -> float | None:
        """One EM pass of ``run``'s model, recorded in ``tried``; returns when its EM step ended
        (``time.perf_counter()``; what follows is its tail), None where the step was still
        running at ``deadline`` and stopped there (``em``): the model then goes back to its best
        circuit and takes no more passes (a pass far slower than the last: 14.5 s after 0.6 s was
        measured)."""
        t0 = time.perf_counter()
        if not run.model.em_pass(run.model.circuit_, X, run.done, lows, deadline):
            run.undo()
            run.patience = run.done - run.kept  # (closed: ``open`` is false from now on)
            tried.append({**run.settings, "em_iterations": run.done + 1, "rows": len(train),
                          "seconds": time.perf_counter() - t0, "stopped": True})
            return None
        t1 = time.perf_counter()
        run.model.compiled_ = run.model._compile(run.model.circuit_)
        rows = run.model.score_samples(valid)
        score, run.done = float(rows.mean()), run.done + 1
        if score > run.score:
            run.score, run.kept, run.rows = score, run.done, rows
            run.best, run.best_compiled = copy.deepcopy(run.model.circuit_), run.model.compiled_
            run.best_compiled.circuit = run.best  # (as in ``training``)
        t2 = time.perf_counter()
        took = t2 - t0
        run.seconds = took if run.done == 1 else max(run.seconds, took)  # (the slowest pass yet: a loaded machine)
        tried.append({**run.settings, "em_iterations": run.done, "rows": len(train), "seconds": took,
                      "valid_loglik": score})
        return t1

    def train_all(runs: list[Training]) -> None:
        """Stages 3 and 4: passes until the budget or every model's patience ends, each to the model
        whose last pass raised ``combined`` most per second (module doc). What may still run after
        a pass's EM step, its tail and compiling the mixture (stage 5; taken as long as both models'
        tails), is kept free twice over."""
        X = as_matrix(train, runs[0].model.schema_)
        lows = std_floors(X, runs[0].model.min_std_fraction) if floors is None else floors
        most = EM_MAX if max_em_iterations is None else max_em_iterations

        def mixing() -> float:
            return sum(r.tail for r in runs) if len(runs) == 2 else 0.0

        def ready(run: Training) -> bool:  # (a pass whose step would be cut at once is not started)
            return run.open(most) and time.perf_counter() - start + run.seconds + 2 * (run.tail + mixing()) <= budget_s

        score = combined(runs)
        while able := [r for r in runs if ready(r)]:
            run = max(able, key=lambda r: r.rate)
            stepped = em_pass(run, X, lows, start + budget_s - 2 * (run.tail + mixing()))
            after = combined(runs)
            t2 = time.perf_counter()
            if stepped is not None:  # (the tail: compiling, scoring, keeping the best, the combined score)
                run.tail = max(run.tail, t2 - stepped)
            run.rate, score = (after - score) / tried[-1]["seconds"], after
            tried[-1].update(combined_valid_loglik=after, gain_per_s=run.rate)

    discrete = sum(f.discrete for f in schema.features)
    latent = discrete >= 2 and max_em_iterations != 0  # stage 4 (a latent tree needs EM passes)
    track = budget_s * (1 - TRAINING_SHARE) if latent else budget_s  # stages 1 and 2
    everything = np.arange(len(train))
    order = np.random.default_rng(seed).permutation(len(train))
    alive = []
    for c in candidates(len(train), len(schema), discrete):
        c = {**c, "min_instances_slice": max(c["min_instances_slice"], min_instances_floor)}
        alive += [c] if c not in alive else []
    leader = None  # (validation score, settings): the best of the last rung run
    final: Scored | None = None  # the best fit on every row
    for rung, fraction in enumerate(RUNGS):  # stage 1
        rows = np.sort(order[: max(2, round(fraction * len(train)))])  # (in the data's order)
        scored: list[tuple[float, dict]] = []
        for c in alive:
            if (scored or leader is not None) and not affordable(c, len(rows), SEARCH_SHARE * track):
                break  # no time for it: the leader goes to the final fit
            done = fit(c, rows, SEARCH_SHARE * track)
            scored.append((done[0], c))
            if fraction == 1.0 and (final is None or done[0] > final[0]):
                final = done
        if not scored:
            break
        scored.sort(key=lambda t: -t[0])
        leader = scored[0]
        alive = [c for _, c in scored[: max(1, round(len(scored) * KEEP_AFTER_FIRST)) if rung == 0 else 2]]
        if time.perf_counter() - start > SEARCH_SHARE * track:
            break
    if final is None:  # the budget ended before any fit on every row: learn the leader on them, its slices
        assert leader is not None  # split only if it is predicted to end in time (the first candidate always runs)
        final = fit(leader[1], everything, budget_s if affordable(leader[1], len(train), budget_s) else 0.0)
    for key, (values, beyond) in BEYOND.items():  # stage 2
        queue = list(values)
        while queue and affordable(final[1], len(train), track):  # (timed by the winner's fit)
            value = queue.pop(0)
            other = fit({**final[1], key: value}, everything, track)
            if other[0] > final[0]:
                final = other
                if not queue:  # the grid's largest value won: go on past it while it wins
                    queue.append(beyond(value))
    # stage 3's first pass costs about what a fit does, or, where the fit stopped early, what scoring every
    # training row (as a fit's finish scores the validation rows) and then finishing does
    finish = max(t.get("finish_seconds", 0.0) for t in tried if t["rows"] == len(train))
    runs = [training(final, 1, max(tried[-1]["seconds"], finish * (1 + len(train) / len(valid))), finish)]
    probe = None
    batch = latent_batch(len(train))
    settings: dict = {"min_instances_slice": len(train) + 1, "threshold": THRESHOLDS[0],
                      "leaf_model": "latent-tree", "alpha": ALPHA, "row_clusters": 2,
                      "latent_states": LATENT_STATES, "em_batch_size": batch}
    if latent and affordable(settings, 2 * len(train), budget_s):  # stage 4's latent tree (learned twice), its
        params = {**settings, "seed": seed, **learner}  # states set by a probe pass
        t0 = time.perf_counter()
        model = LearnSPN.from_circuit(grown(params, train, schema, floors, deadline(budget_s)),
                                      {"estimator": "LearnSPN", "params": params})
        X = as_matrix(train, model.schema_)
        sample = X[: PROBE_BATCHES * batch]
        t1 = time.perf_counter()
        lows = std_floors(X, model.min_std_fraction) if floors is None else floors
        if model.em_pass(model.circuit_, sample, 0, lows, deadline(budget_s)):  # (a probe past it: no tree)
            took = time.perf_counter() - t1
            probe = {"latent_states": LATENT_STATES, "rows": len(sample), "seconds": took,
                     "pass_seconds": took * len(train) / len(sample)}
            probe["seconds_left"] = budget_s - (time.perf_counter() - start)
            cards = [f.cardinality for f in schema.features if f.discrete]
            states = latent_states(len(train), discrete, max(cards), probe["pass_seconds"], probe["seconds_left"])
            planned = probe["pass_seconds"] * (states / LATENT_STATES) ** 2
            # the tree learned again, timed by the probe's (its compile growing as states^2), then both models'
            # mixture compiled (the tree's tail taken as long as its fit), twice over: it cannot stop early
            again = (t1 - t0) * max(1.0, (states / LATENT_STATES) ** 2)
            if time.perf_counter() + again + 2 * (again + runs[0].tail) <= start + budget_s:
                tree = fit({**settings, "latent_states": states}, everything, budget_s)
                runs.append(training(tree, LATENT_PATIENCE, planned, tried[-1]["finish_seconds"]))
    train_all(runs)
    models = [run.result() for run in runs]
    if len(runs) == 2:  # stage 5
        models.append(mixture(*runs))
    result: tuple[float, dict, Fitted] = max(models, key=lambda f: f[0])
    elapsed = time.perf_counter() - start
    report = {"chosen": result[1], "valid_loglik": result[0], "latent_probe": probe,
              "default": default_settings(len(train), len(schema)), "tried": tried, "budget_s": budget_s,
              "seconds": elapsed, "over_budget_s": max(0.0, elapsed - budget_s)}
    return result[2], report


class LearnSPNCV(CircuitEstimator):
    """LearnSPN whose settings ``fit`` chooses by ``select_learnspn`` within ``budget_s``, on
    ``valid_fraction`` of its rows held out (seeded), as scikit-learn's ``*CV`` estimators do;
    the circuit is the chosen model's (fitted on the other rows) and ``selection_`` the search's
    report. A FedPC client given this learner chooses its own settings on its own rows."""

    row_settings = ("min_instances_floor",)
    _parameter_constraints = {
        **CircuitEstimator._parameter_constraints,
        "budget_s": [Interval(Real, 0, None, closed="neither")],
        "valid_fraction": [Interval(Real, 0, 1, closed="neither")],
        "min_instances_floor": [Interval(Integral, 1, None, closed="left")],
        "by_label": ["boolean"],
        "min_leaf_rows": [Interval(Integral, 1, None, closed="left")],
        "max_em_iterations": [Interval(Integral, 0, None, closed="left"), None],
    }

    def __init__(self, budget_s: float = 120.0, valid_fraction: float = 0.1, min_instances_floor: int = 1,
                 leaf: str = "gaussian", seed: int = 0, precision: str = "float64",
                 min_std_fraction: float = MIN_STD_FRACTION, by_label: bool = False, min_leaf_rows: int = 1,
                 max_em_iterations: int | None = None) -> None:
        self.budget_s, self.valid_fraction, self.min_instances_floor = budget_s, valid_fraction, min_instances_floor
        self.leaf, self.seed, self.precision, self.min_std_fraction = leaf, seed, precision, min_std_fraction
        self.by_label, self.min_leaf_rows, self.max_em_iterations = by_label, min_leaf_rows, max_em_iterations

    def _learn(self, schema, X, floors):
        if len(X) < 2:
            raise FedpgmError(f"LearnSPNCV needs at least 2 rows to hold some out, got {len(X)}")
        frame = pd.DataFrame(X, columns=schema.names)
        held = np.zeros(len(X), dtype=bool)
        held[np.random.default_rng(self.seed).permutation(len(X))[: max(1, round(self.valid_fraction * len(X)))]] = True
        model, self.selection_ = select_learnspn(
            frame[~held], frame[held], schema, self.budget_s, self.seed, self.min_instances_floor, floors,
            self.max_em_iterations, leaf=self.leaf, precision=self.precision, min_std_fraction=self.min_std_fraction,
            by_label=self.by_label, min_leaf_rows=self.min_leaf_rows)
        return model.circuit_
