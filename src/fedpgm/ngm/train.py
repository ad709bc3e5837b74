"""Training a neural graphical model: its settings, loss, hidden inputs and early stopping.

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
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import networkx as nx
import numpy as np
import torch
import torch.nn.functional as F

from fedpgm.early_stopping import EarlyStopping
from fedpgm.errors import FedpgmError
from fedpgm.ngm.graph import adjacency
from fedpgm.ngm.layout import Layout, numeric
from fedpgm.ngm.network import NGMNet

if TYPE_CHECKING:
    from fedpgm.ngm.model import NGM

EPS = 1e-6


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
