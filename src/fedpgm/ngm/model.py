"""Neural graphical models (Shrivastava and Chajewska): conditional queries, sampling, files.

The model is fitted by ``fedpgm.ngm.train`` (the loss, hidden inputs, early stopping).

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
from dataclasses import asdict
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import torch
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.files import atomic_folder
from fedpgm.model_files import (SEAL, check_file, check_finite, check_keys, check_seal, file_record,
                                read_json, seal)
from fedpgm.ngm.graph import from_edges, to_edges, top_edges
from fedpgm.ngm.layout import MIN_ROWS, Layout, block_quantiles, numeric, quantile_curve
from fedpgm.ngm.network import NGMNet
from fedpgm.ngm.files import DOC_KEYS, FULL, check_document, check_meta
from fedpgm.ngm.train import NGMSettings, Objective, Teachers, train, validation_rows

__all__ = ["MODES", "NGM", "NGMSettings"]

FORMAT = "fedpgm-ngm/1"
MODEL_FILE, WEIGHTS_FILE = "model.json", "weights.safetensors"
MODES = ("direct", "iterative")


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
