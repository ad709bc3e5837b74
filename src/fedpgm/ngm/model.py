"""Neural graphical models (Shrivastava and Chajewska): fit, conditional queries, sampling, files.

Loss (per mini-batch of rows x, network f, feature graph S over F features)::

    fit(x) + lam * log(eps + mean_j sum_i Share[i, j] * S^c[i, j])

- ``fit``: the mean over features of each feature's loss on its own output columns: MSE on a
  standardised numeric feature, cross-entropy over a categorical feature's one-hot block. The
  reference code uses MSE on min-max scaled one-hot columns for everything; a categorical's
  output is a distribution, so cross-entropy is its proper loss, and a feature counts once
  however many categories it has.
- ``P = |W_1|^T ... |W_L|^T`` is the graph-constrained path norm's product of absolute weights,
  summed over each pair of features' columns; ``S^c`` is the complement of the graph
  *including the diagonal* (no feature predicts itself); the norm is elementwise L1 (the
  reference code's spectral norm is a quirk). ``Share[i, j]`` is P[i, j] per column pair
  over output j's incoming strength plus the mean feature's (``incoming_share``).
- Why shares, where the paper divides the whole norm by D^2 (inside the log, a constant factor
  only shifts the loss): the log of the raw norm falls without bound as the network's gain
  shrinks, so it collapses the model to a constant (measured: AUC 0.46 on Adult's income); the
  reference code's row-normalised factors keep mass on every input, so a feature without
  neighbours can never comply (off-graph share stuck near 15%); and one share over all
  features lets a numeric feature read its own input while a 41-category block dominates the
  total. Per output feature, the penalty only falls by moving each feature's incoming strength
  onto its edges, or, for a feature without neighbours, by listening to nothing.
- NGR (Neural Graph Revealers): no input graph; with ``Ps`` the symmetrised feature-level paths
  of the row-normalised product (the reference code's form, averaged over each pair's
  columns), the penalty is ``lam * [log(eps + ||Ps||_1 / F^2) + log(eps + ||diag Ps||_1 / F^2)]``
  (sparsity and no self-dependency, elementwise L1); the revealed graph is the ``sparsity``
  fraction of pairs with the largest ``Ps``.
- Training hides a random subset of each row's inputs (each row draws a rate u ~ U(0, 1) and
  hides each feature with probability u; a hidden input enters at its mean, as an unknown does
  at query time) and scores each output only where its own input was hidden. So no output can
  gain from reading its own input, which the penalty alone does not guarantee (absolute path
  strengths ignore signs: a 1% self-path can carry the signal while the rest cancels), and one
  forward pass answers queries with any evidence subset, the regime sampling works in.
- A separate validation split (``val_fraction``, not the reference code's half of the data) for
  early stopping (``patience`` epochs without improvement) keeps the best weights.

Queries: ``predict(frame, target)`` with the target and any unknown evidence at their means
(``mode="direct"``, one forward pass), or with the unknown inputs refined by gradient descent
so that the network reproduces the known values (``mode="iterative"``, the papers' inference).
Sampling visits the features breadth-first over the graph from a random start feature (then
every other component): the start is drawn from its marginal (quantiles or class frequencies),
each next feature from its predicted distribution given the features drawn so far (categorical)
or as the prediction plus a residual drawn from the quantiles of the validation residuals of
that same prediction (same start, same features before it), so the noise matches the evidence.
Every quantile function is block means of >= ``min_rows`` values (``layout.block_quantiles``),
drawn from along ``layout.quantile_curve``.
Optional Gibbs sweeps then redraw each feature given all the others: the NGM's outputs are
the full conditionals of a dependency network, whose Gibbs chain is how such a model samples;
the one-pass draw conditions each feature only on the part of its neighbourhood drawn before.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from fedpgm.data.schema import Schema
from fedpgm.early_stopping import EarlyStopping
from fedpgm.errors import FedpgmError
from fedpgm.files import atomic_folder
from fedpgm.model_files import (SEAL, BadModelFile, check_file, check_finite, check_keys, check_seal, file_record,
                                need, need_float, need_list, read_json, schema_of, seal)
from fedpgm.ngm.graph import adjacency, from_edges, to_edges, top_edges
from fedpgm.ngm.layout import MIN_ROWS, Layout, block_quantiles, numeric, quantile_curve
from fedpgm.ngm.network import NGMNet

FORMAT = "fedpgm-ngm/1"
MODEL_FILE, WEIGHTS_FILE = "model.json", "weights.safetensors"
EPS = 1e-6
MODES = ("direct", "iterative")
FULL = ""  # residuals given every other feature (no feature name is empty)


@dataclass
class NGMSettings:
    """Training an NGM: hidden units and layers, the graph penalty ``lam``, optimiser, epochs with
    early stopping, and whether it is the NGR variant that reveals a graph."""
    hidden: int = 64
    layers: int = 2
    lam: float = 0.1  # the share penalty reaches log(1e-6); 1.0 costs fit (Adult income AUC 0.69 vs 0.87)
    lr: float = 2e-3
    epochs: int = 200
    batch_size: int = 256
    patience: int = 10
    val_fraction: float = 0.1
    revealer: bool = False  # NGR: learn the graph instead of taking one
    sparsity: float = 0.25  # NGR: fraction of feature pairs kept in the revealed graph
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [(self.hidden >= 1, "hidden must be >= 1"), (self.layers >= 1, "layers must be >= 1"),
                  (self.lam >= 0, "lam must be >= 0"), (self.lr > 0, "lr must be > 0"),
                  (self.epochs >= 1, "epochs must be >= 1"), (self.batch_size >= 1, "batch_size must be >= 1"),
                  (0 < self.val_fraction < 1, "val_fraction must be in (0, 1)")]
        for ok, what in checks:
            if not ok:
                raise FedpgmError(f"NGM setting: {what}")

    @staticmethod
    def from_dict(d: dict) -> "NGMSettings":
        known = {f.name for f in fields(NGMSettings)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise FedpgmError(f"unknown NGM setting(s) {unknown}; known: {sorted(known)}")
        return NGMSettings(**d)


class Objective:
    """The NGM loss for one layout and graph (see the module doc); tensors built once."""

    def __init__(self, layout: Layout, graph: nx.Graph, revealer: bool, lam: float) -> None:
        feats = layout.schema.features
        self.layout, self.lam, self.revealer = layout, lam, revealer
        self.F = len(feats)
        self.E = torch.as_tensor(layout.membership())
        self.widths = self.E.sum(1)
        A = adjacency(graph, layout.schema.names)
        self.outside = torch.as_tensor(1.0 - A) * (1 - torch.eye(self.F)) + torch.eye(self.F)
        blocks = layout.blocks
        self.num_cols = torch.tensor([b.start for f, b in zip(feats, blocks) if numeric(f)], dtype=torch.long)
        self.num_feats = torch.tensor([i for i, f in enumerate(feats) if numeric(f)], dtype=torch.long)
        self.cat = [(i, b) for i, (f, b) in enumerate(zip(feats, blocks)) if not numeric(f)]

    def feature_losses(self, out: torch.Tensor, X: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
        """(rows, F) each observed feature's loss (0 where unobserved)."""
        losses = torch.zeros(out.shape[0], self.F)
        if len(self.num_cols):
            losses[:, self.num_feats] = (out[:, self.num_cols] - X[:, self.num_cols]) ** 2
        for i, b in self.cat:
            losses[:, i] = -(F.log_softmax(out[:, b], dim=1) * X[:, b]).sum(1)
        return losses * seen

    def fit(self, out: torch.Tensor, X: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
        per_feature = self.feature_losses(out, X, seen).sum(0) / seen.sum(0).clamp(min=1)
        return per_feature.mean()

    def feature_paths(self, net: NGMNet) -> torch.Tensor:
        """(F, F) summed path strengths between features' columns (inputs x outputs)."""
        return self.E @ net.path_matrix() @ self.E.T

    def off_graph(self, P: torch.Tensor) -> torch.Tensor:
        """(F,) each output feature's share of incoming path strength from features it has no
        edge to (itself included); see ``incoming_share``."""
        return (incoming_share(P, self.widths) * self.outside).sum(0)

    def penalty(self, net: NGMNet) -> torch.Tensor:
        if self.revealer:
            Ps = self.revealed_paths(net)
            return (torch.log(EPS + Ps.sum() / self.F ** 2)
                    + torch.log(EPS + torch.diagonal(Ps).sum() / self.F ** 2))
        return torch.log(EPS + self.off_graph(self.feature_paths(net)).mean())

    def revealed_paths(self, net: NGMNet) -> torch.Tensor:
        """(F, F) NGR's symmetrised feature-level paths of the row-normalised product, averaged
        over each feature pair's columns."""
        P = self.E @ net.path_matrix(normalised=True) @ self.E.T / (self.widths[:, None] * self.widths[None, :])
        return (P + P.T) / 2

    def __call__(self, net: NGMNet, inputs: torch.Tensor, scored: torch.Tensor,
                 X: torch.Tensor) -> torch.Tensor:
        """Fit of the ``scored`` values of ``X`` from ``inputs``, plus the penalty."""
        fit = self.fit(net(inputs), X, scored)
        return fit + self.lam * self.penalty(net) if self.lam else fit


def incoming_share(P, widths):
    """(F, F) S[i, j]: output feature j's incoming path strength from feature i (per column
    pair: a 3-category block sends and receives through 3 columns) over j's total incoming strength
    plus the mean feature's. A share of j's inputs, and small for every i when j barely listens
    to anything (a feature without neighbours can comply by listening to nothing)."""
    P = P / (widths[:, None] * widths[None, :])
    into = P.sum(0)
    scale = into + into.mean()
    return P / (scale.clip(min=1e-12) if isinstance(P, np.ndarray) else scale.clamp(min=1e-12))


def hide(X: torch.Tensor, seen: torch.Tensor, layout: Layout,
         gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, hidden): ``X`` with a random subset of each row's features at their means (rate
    u ~ U(0, 1) per row, at least one feature), and the (rows, F) 0/1 mask of hidden features;
    the fit loss scores observed values whose input was hidden (``seen * hidden``)."""
    rows, F = seen.shape
    rate = torch.rand(rows, 1, generator=gen)
    drop = torch.rand(rows, F, generator=gen) < rate
    drop[torch.arange(rows), torch.randint(0, F, (rows,), generator=gen)] = True
    cols = drop.float() @ torch.as_tensor(layout.membership())  # (rows, D') 0/1
    means = torch.as_tensor(layout.means())
    return X * (1 - cols) + means * cols, drop.float()


class Teachers:
    """Soft targets for distillation: each row's target is the prediction of the teacher NGM
    that drew it (over the student's features, each teacher with its own encoding), for the
    same partly hidden inputs.

    A numeric target is the teacher's prediction, a categorical one its class probabilities,
    both in the student's encoding. Training on rows drawn from a mixture of teachers with each
    row taught by its own teacher has the mixture's conditionals as its optimum (each teacher's
    conditional weighted by how likely that teacher makes the evidence), and removes the
    sampling noise from the targets. (Averaging every teacher's conditional instead weights
    them equally everywhere: the conditional of no distribution, and measured worse on Adult.)
    """

    def __init__(self, teachers: list["NGM"], layout: Layout, teacher_of: np.ndarray | None = None) -> None:
        self.layout, self.parts = layout, []
        names = layout.schema.names
        if teacher_of is None and len(teachers) != 1:
            raise FedpgmError(f"{len(teachers)} teachers need each row's teacher (teacher_of)")
        for t in teachers:
            if t.names != names:
                raise FedpgmError(f"teacher features {t.names} differ from the student's {names}")
            scale, shift = np.ones(layout.width, np.float32), np.zeros(layout.width, np.float32)
            for f, b in zip(layout.schema.features, layout.blocks):
                if numeric(f):  # student units -> teacher units
                    s, u = layout.stats[f.name], t.layout.stats[f.name]
                    scale[b.start], shift[b.start] = s["std"] / u["std"], (s["mean"] - u["mean"]) / u["std"]
            self.parts.append((t, torch.as_tensor(scale), torch.as_tensor(shift), torch.as_tensor(t.layout.means())))
        self.E = torch.as_tensor(layout.membership())
        self.cat = [b for f, b in zip(layout.schema.features, layout.blocks) if not numeric(f)]
        # (rows,) int: the teacher of each training row, -1 = the row fits its own values
        self.teacher_of = None if teacher_of is None else torch.as_tensor(np.asarray(teacher_of, dtype=np.int64))

    def taught(self, rows: torch.Tensor) -> torch.Tensor:
        """(rows, 1) 1.0 where a teacher gives the row's targets, 0.0 where it fits its own values."""
        if self.teacher_of is None:
            return torch.ones(len(rows), 1)
        return (self.teacher_of[rows] >= 0).float()[:, None]

    def targets(self, X: torch.Tensor, rows: torch.Tensor, inputs: torch.Tensor,
                hidden: torch.Tensor) -> torch.Tensor:
        """Fit targets for the batch ``X`` (training-table ``rows``; all D' columns)."""
        which = torch.zeros(len(X), dtype=torch.int64) if self.teacher_of is None else self.teacher_of[rows]
        cols = hidden @ self.E
        out = X.clone()
        with torch.no_grad():
            for k, (t, scale, shift, means) in enumerate(self.parts):
                mine = which == k
                if not mine.any():
                    continue
                x = (inputs[mine] * scale + shift) * (1 - cols[mine]) + means * cols[mine]
                pred = (t.net(x) - shift) / scale  # numeric columns back to student units
                for b in self.cat:
                    pred[:, b] = torch.softmax(pred[:, b], dim=1)
                out[mine] = pred
        return out


def train(net: NGMNet, objective: Objective, X: np.ndarray, seen: np.ndarray,
          settings: NGMSettings, progress=None, teacher: Teachers | None = None,
          after_epoch=None) -> list[dict]:
    """Adam with early stopping on a validation split; ``net`` ends with its best weights.
    With a ``teacher``, the fit targets are its soft predictions instead of the rows' values;
    ``after_epoch(net)``, if given, is called after every epoch (and once before the first).

    Returns the per-epoch history ``[{"epoch", "train_loss", "val_loss"}]``.
    """
    rng = np.random.default_rng(settings.seed)
    gen = torch.Generator().manual_seed(settings.seed)
    n = len(X)
    val_seed = settings.seed + 1
    order = rng.permutation(n)
    n_val = max(1, int(round(settings.val_fraction * n))) if n > 1 else 0
    val, tr = order[:n_val], order[n_val:]
    if len(tr) == 0:
        raise FedpgmError(f"{n} row(s) are too few to train an NGM with a validation split; add rows")
    Xt, St = torch.as_tensor(X), torch.as_tensor(seen, dtype=torch.float32)
    vrows = torch.as_tensor(val if n_val else tr)
    Xv, Sv = Xt[vrows], St[vrows]
    opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=settings.lr)
    stop, history = EarlyStopping(net, settings.patience, tolerance=1e-5), []
    if after_epoch is not None:
        after_epoch(net)
    for epoch in range(settings.epochs):
        val_gen = torch.Generator().manual_seed(val_seed)  # the same hidden subsets every epoch
        perm = tr[rng.permutation(len(tr))]
        total = 0.0
        for start in range(0, len(perm), settings.batch_size):
            idx = torch.as_tensor(perm[start:start + settings.batch_size])
            loss = step_loss(net, objective, Xt[idx], St[idx], idx, gen, teacher)
            opt.zero_grad()
            loss.backward()
            net.mask_gradients()
            opt.step()
            total += float(loss.detach()) * len(idx)
        with torch.no_grad():
            v = float(step_loss(net, objective, Xv, Sv, vrows, val_gen, teacher))
        history.append({"epoch": epoch + 1, "train_loss": total / len(tr), "val_loss": v})
        if progress is not None:
            progress(epoch + 1, v)
        if after_epoch is not None:
            after_epoch(net)
        if stop.update(v):
            break
    stop.restore()
    return history


def validation_rows(n: int, settings: NGMSettings) -> np.ndarray:
    """The rows ``train`` holds out for validation (the first draws of its seeded permutation)."""
    n_val = max(1, int(round(settings.val_fraction * n)))
    return np.random.default_rng(settings.seed).permutation(n)[:n_val]


def step_loss(net: NGMNet, objective: Objective, X: torch.Tensor, seen: torch.Tensor, rows: torch.Tensor,
              gen: torch.Generator, teacher: Teachers | None) -> torch.Tensor:
    """The objective on a batch ``X`` (the training table's ``rows``) with random inputs hidden.

    A row's own values score only the outputs whose input was hidden (an output must not copy
    its input); a teacher's soft targets score every output, since the teacher predicted each
    from the same inputs under the same graph (no output sees its own input). Measured on Adult
    (seed 0, income AUC on public-test): 0.8452 scoring hidden outputs only, 0.8533 all.
    """
    inputs, hidden = hide(X, seen, objective.layout, gen)
    if teacher is None:
        return objective(net, inputs, seen * hidden, X)
    scored = torch.maximum(hidden, teacher.taught(rows))
    return objective(net, inputs, seen * scored, teacher.targets(X, rows, inputs, hidden))


class NGM:
    """A fitted neural graphical model over ``layout.schema``'s features with graph ``graph``."""

    def __init__(self, layout: Layout, graph: nx.Graph, net: NGMNet, settings: NGMSettings,
                 residuals: dict[str, dict[str, list[float]]] | None = None, history: list | None = None) -> None:
        self.layout, self.graph, self.net, self.settings = layout, graph, net, settings
        self.residuals = residuals or {}
        self.history = history or []
        self.meta: dict = {}  # what its writer stored beside it (``save(meta=)``), e.g. estimator parameters

    @property
    def schema(self) -> Schema:
        return self.layout.schema

    @property
    def names(self) -> list[str]:
        return self.schema.names

    # -- learning ---------------------------------------------------------------------------
    @staticmethod
    def fit(frame: pd.DataFrame, schema: Schema, graph: nx.Graph | None = None,
            settings: NGMSettings | None = None, layout: Layout | None = None,
            progress=None, teachers: list["NGM"] | None = None,
            teacher_of: np.ndarray | None = None, min_rows: int = MIN_ROWS) -> "NGM":
        """Learn an NGM on ``frame``'s ``schema`` columns under ``graph`` (None: NGR or complete).

        ``layout`` fixes the encoding (e.g. the federation's agreed statistics); by default it
        is fitted on ``frame``. ``teachers``: distil them on ``frame``'s rows: ``teacher_of``
        (rows,) int names each row's teacher, whose predictions are its fit targets (see
        ``Teachers``); -1 keeps a row's own values (e.g. public rows); None with one teacher.
        ``min_rows``: the fewest rows behind each quantile the model keeps (a client passes its
        policy's; the policy default 10 otherwise).
        """
        settings = settings or NGMSettings()
        schema.check_names(frame.columns.intersection(schema.names))
        missing = [n for n in schema.names if n not in frame.columns]
        if missing:
            raise FedpgmError(f"training table lacks column(s) {missing}; add them or drop them from the schema")
        if len(frame) < 2:
            raise FedpgmError(f"{len(frame)} row(s) are too few to train an NGM; add rows")
        layout = layout or Layout.fit(frame, schema, min_rows)
        if graph is None:
            if not settings.revealer:
                raise FedpgmError("an NGM needs a graph; pass one or use the NGR variant (revealer=True)")
            graph = nx.complete_graph(schema.names)
        unknown = [n for n in graph.nodes() if n not in schema]
        if unknown or set(schema.names) - set(graph.nodes()):
            graph = from_edges(schema.names, to_edges(graph))  # names the bad node in its error
        X, seen = layout.encode(frame)
        D = layout.width
        torch.manual_seed(settings.seed)
        net = NGMNet([D] + [settings.hidden] * settings.layers + [D], seed=settings.seed)
        objective = Objective(layout, graph, settings.revealer, settings.lam)
        teacher = Teachers(teachers, layout, teacher_of) if teachers else None
        history = train(net, objective, X, seen, settings, progress, teacher)
        model = NGM(layout, graph, net, settings, history=history)
        if settings.revealer:
            model.graph = model.revealed_graph(settings.sparsity)
        model.residuals = model.residual_quantiles(X, seen, min_rows)
        return model

    def residual_quantiles(self, X: np.ndarray, seen: np.ndarray,
                           min_rows: int = MIN_ROWS) -> dict[str, dict[str, list[float]]]:
        """``[start][feature]``: quantiles (block means of >= ``min_rows`` values) of a numeric
        feature's standardised residual on the validation rows when predicted, as sampling does,
        from the features before it in the breadth-first order from ``start`` (the noise sampling
        adds to the prediction), and ``[FULL][feature]`` when predicted from all other features
        (Gibbs sweeps). ``X`` (rows, D'), ``seen`` (rows, F). With fewer than 2 * ``min_rows``
        validation rows, all rows (a small client: two blocks at least); [0.0] (no noise) for a
        feature with fewer than ``min_rows`` observed residuals."""
        rows = validation_rows(len(X), self.settings)
        if len(rows) < 2 * min_rows:
            rows = np.arange(len(X))
        n_val = len(rows)
        Xv, Sv = X[rows], seen[rows]
        means = self.layout.means()

        def quantiles(r: np.ndarray) -> list[float]:
            return block_quantiles(r, min_rows) if r.size >= min_rows else [0.0]

        res: dict[str, dict[str, list[float]]] = {}
        for start in self.names:
            x = np.tile(means, (n_val, 1)).astype(np.float32)
            for k, name in enumerate(self.order_from(start)):
                i, f, b = self.schema.index(name), self.schema[name], self.layout.block(name)
                if k > 0 and numeric(f):
                    with torch.no_grad():
                        out = self.net(torch.as_tensor(x))[:, b.start].numpy()
                    ok = Sv[:, i]
                    res.setdefault(start, {})[name] = quantiles(Xv[ok, b.start] - out[ok])
                x[Sv[:, i], b] = Xv[Sv[:, i], b]  # reveal it, as sampling fixes it
        x = Xv.copy()
        for i, (f, b) in enumerate(zip(self.schema.features, self.layout.blocks)):
            if numeric(f):  # given every other feature (Gibbs sweeps)
                hidden = x.copy()
                hidden[:, b] = means[b]
                with torch.no_grad():
                    out = self.net(torch.as_tensor(hidden))[:, b.start].numpy()
                res.setdefault(FULL, {})[f.name] = quantiles(Xv[Sv[:, i], b.start] - out[Sv[:, i]])
        res.setdefault(FULL, {})
        return res

    # -- the graph the network follows -------------------------------------------------------
    def feature_paths(self) -> np.ndarray:
        """(F, F) path strengths between features (input row, output column)."""
        objective = Objective(self.layout, self.graph, False, 0.0)
        with torch.no_grad():
            return objective.feature_paths(self.net).numpy()

    def off_graph_share(self) -> np.ndarray:
        """(F,) per output feature, the share of its incoming path strength from features it
        has no edge to, itself included (what the penalty drives to zero)."""
        objective = Objective(self.layout, self.graph, False, 0.0)
        with torch.no_grad():
            return objective.off_graph(objective.feature_paths(self.net)).numpy()

    def revealed_graph(self, sparsity: float) -> nx.Graph:
        objective = Objective(self.layout, self.graph, True, 0.0)
        with torch.no_grad():
            Ps = objective.revealed_paths(self.net).numpy()
        return top_edges(self.names, Ps * (1 - np.eye(len(Ps))), sparsity)

    # -- queries ------------------------------------------------------------------------------
    def check_evidence(self, frame: pd.DataFrame) -> None:
        unknown = [c for c in frame.columns if c not in self.schema]
        if unknown:
            raise FedpgmError(f"evidence column(s) {unknown} are not in the model; it knows {self.names}")
        for c in frame.columns:
            v = frame[c]
            if not pd.api.types.is_numeric_dtype(v):
                raise FedpgmError(f"evidence column '{c}' holds non-numeric values; encode categories "
                                  "as codes (the CLI does this from category names)")
            f = self.schema[c]
            if f.discrete:
                x = v.to_numpy(dtype=float)
                x = x[~np.isnan(x)]
                if ((x != np.round(x)) | (x < 0) | (x >= f.cardinality)).any():
                    raise FedpgmError(f"evidence column '{c}' holds a code outside 0..{f.cardinality - 1}")

    def predict(self, frame: pd.DataFrame, target: str, mode: str = "direct",
                steps: int = 100, lr: float = 0.05) -> np.ndarray:
        """E[target | evidence] (numeric, (rows,)) or P(target | evidence) (discrete, (rows, k)).

        ``frame`` holds any subset of the model's columns (NaN = unknown); the target's own
        column, if present, is ignored.
        """
        if target not in self.schema:
            raise FedpgmError(f"target '{target}' is not in the model; it knows {self.names}")
        if mode not in MODES:
            raise FedpgmError(f"unknown inference mode '{mode}'; use direct or iterative")
        self.check_evidence(frame)
        evidence = frame.drop(columns=[target], errors="ignore")
        X, seen = self.layout.encode(evidence)
        b, f = self.layout.block(target), self.schema[target]
        if mode == "direct":
            with torch.no_grad():
                out = self.net(torch.as_tensor(X))[:, b]
        else:
            out = self.refine(X, seen, steps, lr)[:, b]
        if numeric(f):
            return self.layout.to_value(target, out[:, 0].numpy().astype(float))
        if mode == "iterative":
            return out.numpy().astype(float)
        return torch.softmax(out, dim=1).numpy().astype(float)

    def refine(self, X: np.ndarray, seen: np.ndarray, steps: int, lr: float) -> torch.Tensor:
        """(rows, D') inputs with the unknowns optimised so that the network's outputs reproduce
        the known values (categorical unknowns stay distributions: softmax of free logits)."""
        objective = Objective(self.layout, self.graph, False, 0.0)
        Xt, St = torch.as_tensor(X), torch.as_tensor(seen, dtype=torch.float32)
        unknown_cols = (1 - St) @ objective.E  # (rows, D')
        logits = torch.log(Xt.clamp(min=1e-6)).detach()
        free = torch.where(unknown_cols > 0, torch.where(self.cat_columns(), logits, Xt), Xt).clone()
        free.requires_grad_(True)
        for p in self.net.parameters():
            p.requires_grad_(False)
        opt = torch.optim.Adam([free], lr=lr)
        try:
            for _ in range(steps):
                x = self.assemble(Xt, free, unknown_cols)
                loss = objective.fit(self.net(x), Xt, St)
                opt.zero_grad()
                loss.backward()
                opt.step()
        finally:
            for p in self.net.parameters():
                p.requires_grad_(True)
        with torch.no_grad():
            return self.assemble(Xt, free.detach(), unknown_cols)

    def cat_columns(self) -> torch.Tensor:
        """(D',) bool: columns of categorical blocks."""
        mask = torch.zeros(self.layout.width, dtype=torch.bool)
        for f, b in zip(self.schema.features, self.layout.blocks):
            if not numeric(f):
                mask[b] = True
        return mask

    def assemble(self, Xt: torch.Tensor, free: torch.Tensor, unknown_cols: torch.Tensor) -> torch.Tensor:
        """Known inputs from ``Xt``; unknown numeric inputs from ``free``, categorical ones as the
        softmax of ``free``'s logits over each block."""
        x = free.clone()
        for f, b in zip(self.schema.features, self.layout.blocks):
            if not numeric(f):
                x[:, b] = torch.softmax(free[:, b], dim=1)
        return Xt * (1 - unknown_cols) + x * unknown_cols

    # -- sampling -------------------------------------------------------------------------------
    def order_from(self, start: str) -> list[str]:
        """Breadth-first order over the graph from ``start``, then every other component."""
        order = [start] + [v for _, v in nx.bfs_edges(self.graph, start)]
        for name in self.names:
            if name not in order:
                order += [name] + [v for _, v in nx.bfs_edges(self.graph, name)]
        return order

    def sample(self, n: int, seed: int = 0, sweeps: int = 0) -> pd.DataFrame:
        """``n`` rows drawn along breadth-first orders from random start features, then
        ``sweeps`` Gibbs sweeps (codes for discrete columns, index 0..n-1)."""
        if n < 1:
            raise FedpgmError(f"number of samples must be >= 1, got {n}")
        if sweeps < 0:
            raise FedpgmError(f"Gibbs sweeps must be >= 0, got {sweeps}")
        rng = np.random.default_rng(seed)
        starts = rng.integers(0, len(self.names), n)
        X = np.tile(self.layout.means(), (n, 1)).astype(np.float32)
        for s in np.unique(starts):
            rows = np.flatnonzero(starts == s)
            block = np.tile(self.layout.means(), (len(rows), 1)).astype(np.float32)
            for k, name in enumerate(self.order_from(self.names[s])):
                self.draw(block, name, rng, self.residuals.get(self.names[s], {}).get(name), marginal=k == 0)
            X[rows] = block
        means = self.layout.means()
        for _ in range(sweeps):
            for name in self.names:
                b = self.layout.block(name)
                X[:, b] = means[b]  # its own input hidden, as in training
                self.draw(X, name, rng, self.residuals[FULL].get(name), marginal=False)
        return self.decode(X)

    def draw(self, X: np.ndarray, name: str, rng: np.random.Generator, residuals: list | None,
             marginal: bool) -> None:
        """Set feature ``name`` in ``X`` (rows, D') to a draw: from its marginal (``marginal``),
        else given the other columns of ``X``, from its predicted distribution (categorical) or
        as the prediction plus a residual drawn from ``residuals``' quantiles (numeric)."""
        f, b, stats = self.schema[name], self.layout.block(name), self.layout.stats[name]
        n = len(X)
        if numeric(f):
            levels, q = quantile_curve((np.asarray(stats["quantiles"]) - stats["mean"]) / stats["std"])
            if marginal:
                value = np.interp(rng.uniform(size=n), levels, q)
            else:
                with torch.no_grad():
                    out = self.net(torch.as_tensor(X))[:, b.start].numpy()
                noise = np.interp(rng.uniform(size=n), *quantile_curve(residuals or [0.0]))
                value = np.clip(out + noise, q[0], q[-1])
            if f.kind == "ordinal":  # snap to a level, as the data has
                value = (self.layout.to_value(name, value) - stats["mean"]) / stats["std"]
            X[:, b.start] = value
            return
        if marginal:
            codes = rng.choice(f.cardinality, size=n, p=np.asarray(stats["freq"]))
        else:
            with torch.no_grad():
                p = torch.softmax(self.net(torch.as_tensor(X))[:, b], dim=1).numpy().astype(float)
            codes = (p.cumsum(axis=1) > rng.uniform(size=(n, 1))).argmax(axis=1).clip(max=f.cardinality - 1)
        X[:, b] = 0.0
        X[np.arange(n), b.start + codes] = 1.0

    def decode(self, X: np.ndarray) -> pd.DataFrame:
        """Network columns (one-hot / standardised) back to a table of values and codes."""
        cols = {}
        for f, b in zip(self.schema.features, self.layout.blocks):
            cols[f.name] = (self.layout.to_value(f.name, X[:, b.start].astype(float)) if numeric(f)
                            else X[:, b].argmax(axis=1).astype(float))
        return pd.DataFrame(cols)

    # -- files and messages -----------------------------------------------------------------------
    def to_payload(self) -> tuple[dict, dict[str, np.ndarray]]:
        """(JSON document, weight arrays): what a file or a message carries."""
        doc = {"format": FORMAT, "layout": self.layout.to_dict(), "edges": to_edges(self.graph),
               "widths": self.net.widths, "settings": asdict(self.settings),
               "residuals": self.residuals}
        return doc, self.net.arrays()

    @staticmethod
    def from_payload(doc: dict, arrays: dict[str, np.ndarray], where: str = "model") -> "NGM":
        """The NGM of a document and its weight arrays (a file's or a peer's), every field checked
        (``check_document``) and the arrays' names, dtypes and shapes matched to the widths before
        the network is built."""
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise FedpgmError(f"{where} is not an NGM ({FORMAT}); write one with `fedpgm ngm fit`")
        layout, widths = check_document(doc, where)
        try:
            settings = NGMSettings.from_dict(doc["settings"])
            graph = from_edges(layout.schema.names, doc["edges"])
        except (KeyError, TypeError, ValueError) as e:
            raise FedpgmError(f"{where} is damaged ({type(e).__name__}: {e}); write it again") from None
        residuals = {s: {k: [float(x) for x in v] for k, v in by.items()} for s, by in doc["residuals"].items()}
        if widths[0] != layout.width or widths[-1] != layout.width:
            raise FedpgmError(f"{where}: network width {widths[0]} does not match its {layout.width} columns")
        expected = {}
        for i in range(len(widths) - 1):
            expected.update({f"W{i}": (widths[i + 1], widths[i]), f"b{i}": (widths[i + 1],)})
        for key, shape in expected.items():
            if key not in arrays or tuple(arrays[key].shape) != shape:
                got = None if key not in arrays else tuple(arrays[key].shape)
                raise FedpgmError(f"{where}: weight {key} should have shape {shape}, has {got}")
        odd = sorted(k for k in arrays if k not in expected or np.asarray(arrays[k]).dtype.kind != "f")
        if odd:
            raise FedpgmError(f"{where}: weight arrays {[str(k)[:40] for k in odd[:5]]} are unknown or not floats")
        return NGM(layout, graph, NGMNet.from_arrays(arrays, widths), settings, residuals)

    def save(self, folder: str | Path, meta: dict | None = None) -> Path:
        """``model.json`` + ``weights.safetensors`` in ``folder`` (replaced atomically); ``meta``
        (JSON) is kept beside the model and read back as ``load(folder).meta``. ``model.json``
        records the weights' size and SHA-256 and its own checksum (``seal``)."""
        doc, arrays = self.to_payload()
        folder = Path(folder)
        with atomic_folder(folder) as tmp:
            save_file(arrays, str(tmp / WEIGHTS_FILE))
            doc = {**doc, "weights": file_record(tmp / WEIGHTS_FILE), "meta": meta if meta is not None else self.meta}
            (tmp / MODEL_FILE).write_text(json.dumps(seal(doc)))
        return folder

    @staticmethod
    def load(folder: str | Path) -> "NGM":
        """The NGM ``save`` wrote: fields checked, then the weights' record, the weights, the
        network's shapes, and last the document's checksum; every failure a ``FedpgmError``."""
        folder = Path(folder)
        doc_path, weights_path = folder / MODEL_FILE, folder / WEIGHTS_FILE
        if not doc_path.is_file() or not weights_path.is_file():
            raise FedpgmError(f"{folder} is not an NGM folder ({MODEL_FILE} + {WEIGHTS_FILE}); "
                              "write one with `fedpgm ngm fit --out`")
        doc, where = read_json(doc_path), str(doc_path)
        if not isinstance(doc, dict):
            raise FedpgmError(f"{doc_path} is not an NGM model document")
        check_keys(doc, where, "document", (*DOC_KEYS, "weights", "meta"), (SEAL,))
        meta = check_meta(doc["meta"], where)
        check_file(weights_path, doc["weights"], where)
        try:
            arrays = load_file(str(weights_path))
        except (SafetensorError, OSError) as e:
            raise FedpgmError(f"{folder}: cannot read the model ({e}); write it again") from None
        check_finite(arrays, where)
        model = NGM.from_payload(doc, arrays, where)
        check_seal(doc, where)
        model.meta = meta
        return model


DOC_KEYS = ("format", "layout", "edges", "widths", "settings", "residuals")
SETTING_TYPES = {"int": int, "float": float, "bool": bool}
MAX_WIDTH = 2 ** 20


def check_document(doc: dict, where: str) -> tuple[Layout, list[int]]:
    """The layout and widths of an NGM document whose every field has its type and range."""
    check_keys(doc, where, "document", DOC_KEYS, ("weights", "meta", SEAL))
    layout = layout_of(doc["layout"], where)
    widths = need_list(doc["widths"], where, "widths", int)
    if len(widths) < 2 or any(not 1 <= w <= MAX_WIDTH for w in widths):
        raise BadModelFile(f"{where}: field 'widths' must list at least 2 sizes 1..{MAX_WIDTH}")
    settings = check_keys(doc["settings"], where, "settings", (), [f.name for f in fields(NGMSettings)])
    for f in fields(NGMSettings):
        if f.name in settings:
            need(settings[f.name], SETTING_TYPES[str(f.type)], where, f"settings.{f.name}")
    for i, e in enumerate(need_list(doc["edges"], where, "edges", list)):
        need_list(e, where, f"edges[{i}]", str, 2)
    residuals = check_keys(doc["residuals"], where, "residuals", (FULL,), layout.schema.names)
    for start, by in residuals.items():
        for name, values in check_keys(by, where, f"residuals.{start}", (), layout.schema.names).items():
            quantile_list(values, where, f"residuals.{start}.{name}")
    return layout, widths


def layout_of(doc, where: str) -> Layout:
    """The layout: its schema, and per feature the statistics sampling and encoding read."""
    check_keys(doc, where, "layout", ("schema", "stats"))
    schema = schema_of(doc["schema"], where, "layout.schema")
    stats = check_keys(doc["stats"], where, "layout.stats", schema.names)
    for f in schema.features:
        name = f"layout.stats.{f.name}"
        if numeric(f):
            s = check_keys(stats[f.name], where, name, ("mean", "std", "quantiles"))
            need_float(s["mean"], where, f"{name}.mean")
            need_float(s["std"], where, f"{name}.std", 1e-300)
            quantile_list(s["quantiles"], where, f"{name}.quantiles")
            continue
        freq = need_list(check_keys(stats[f.name], where, name, ("freq",))["freq"], where, f"{name}.freq",
                         float, f.cardinality)
        if any(need_float(p, where, f"{name}.freq", 0.0, 1.0) < 0 for p in freq) or abs(sum(freq) - 1) > 1e-6:
            raise BadModelFile(f"{where}: field '{name}.freq' must be probabilities summing to 1")
    try:
        return Layout.from_dict(doc)
    except FedpgmError as e:
        raise BadModelFile(f"{where}: field 'layout': {e}") from None


def quantile_list(values, where: str, name: str) -> None:
    """A quantile function: 1 to ``MAX_QUANTILES`` finite numbers."""
    from fedpgm.ngm.layout import MAX_QUANTILES

    if not 1 <= len(need_list(values, where, name, float)) <= MAX_QUANTILES:
        raise BadModelFile(f"{where}: field '{name}' must hold 1 to {MAX_QUANTILES} numbers")
    for x in values:
        need_float(x, where, name)


def check_meta(meta, where: str) -> dict:
    """``meta`` is an object; its ``estimator`` (if any) holds valid ``FederatedNGM`` parameters
    and its ``info`` (if any) is an object."""
    need(meta, dict, where, "meta", "an object")
    if "info" in meta:
        need(meta["info"], dict, where, "meta.info", "an object")
    if "estimator" in meta:
        from fedpgm.ngm.estimator import FederatedNGM  # (it imports this module)

        params = need(meta["estimator"], dict, where, "meta.estimator", "an object")
        try:
            FederatedNGM().set_params(**params).check_params()
        except (TypeError, ValueError) as e:  # (FedpgmError is a ValueError)
            raise BadModelFile(f"{where}: field 'meta.estimator' is not valid for FederatedNGM: "
                               f"{str(e)[:300]}") from None
    return meta
