"""FC[DT]: a federated circuit whose leaves are decision trees, joined at one root.

The FedPC paper notes that federated circuits are not restricted to probabilistic leaves:
"parameterizing leaves by decision trees and introducing a node that performs averaging yields a
bagging model" (its FC[DT] rows of Table 7). Here every client that holds the label fits
scikit-learn ``DecisionTreeClassifier``s on its own columns and rows (horizontal: all columns,
its rows; vertical/hybrid: its columns, with the label shared to it), once: one tree on all its
rows, or with ``trees`` = B > 1, B trees on bootstrap resamples of its rows, averaged into the
client's expert (bagging inside the client; adult, horizontal x5, seed 0: one tree 0.853 /
0.784 accuracy / macro-F1, 10 bootstrap trees 0.860 / 0.790). The root follows
FedPC's semantics: over clients that hold the same columns it averages the trees' class
probabilities weighted by row counts (a sum node, the paper's bagging, of deep trees: at least
5 rows per leaf); over clients whose columns are disjoint (vertical) it multiplies them as
experts on separate evidence, p(y | x) proportional to prod_k p_k(y | x_k) / p(y)^(K-1) (a
product node; exact when the column blocks are independent given y). A product multiplies the
experts' errors instead of averaging them out, so there each client picks its leaf size by
5-fold cross-validated log-loss (calibrated leaves). ``combine`` and ``min_samples_leaf``
override both choices. Measured on Adult (seed 0, vertical x2): mean root with leaves of 5:
accuracy 0.837, macro-F1 0.744; product root with cross-validated leaves: 0.852, 0.791.

``ensemble="boosting"`` (``--ensemble boosting``) makes each client's expert gradient-boosted
trees instead (scikit-learn's ``GradientBoostingClassifier``, whose fitted trees are public
tree arrays, unlike HistGradientBoosting's, given the latter's tree shape and early-stopped on a
tenth of the client's rows): still one message per client, joined by
the same root (``plan_root``). Adult, 3 seeds, accuracy / macro-F1: horizontal x5 0.869 / 0.806,
vertical x2 0.860 / 0.807, hybrid x3 0.850 / 0.788 (one bagged tree per client: 0.852 / 0.783,
0.846 / 0.787, 0.834 / 0.746; docs/fedpc.md).

Each client's expert, its trees as arrays (a model, never rows) and their vectorised walk are
``fedpgm.fedpc.experts``; this module is the server's side: the root (``TreeCircuit``,
``plan_root``), its model files and the round (``fit_fcdt``).
"""

from __future__ import annotations

import json
import time
import zipfile
from typing import Any, ClassVar, Literal, cast
from pathlib import Path

import numpy as np
import pandas as pd

from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.fedpc.experts import ENSEMBLES, Expert, expert_from_message
from fedpgm.model_files import (SEAL, BadModelFile, check_file, check_keys, check_schema_doc, check_seal, file_record,
                                need, need_float, need_int, need_list, read_json, seal)
from fedpgm.federation.base import Federation
from fedpgm.federation.psi import align_rows, check_align
from fedpgm.files import atomic_folder

BAGGING_LEAF = 5  # min_samples_leaf under a mean root
PRIOR_MIX = 0.01  # product root: each expert's probabilities mixed with the prior, so that one
#                   client's pure leaf (a frequency of 0) cannot veto every other client's evidence
COMBINES = ("auto", "mean", "product")
FORMAT = "fedpgm-fcdt-3"  # trees.json; 3: sealed; older ones are refused with a hint to refit
MAX_TREES = 10_000  # trees per expert a model file may list
BOOSTING_STAGES = 100  # the most boosting stages when --trees is not given (early stopping may end sooner)
SHARED = {"bagging": "each labelled client's trees: split columns and thresholds, leaf class frequencies; its "
                      "class frequencies and row count",
          "boosting": "each labelled client's boosted trees: split columns and thresholds, leaf scores; its class "
                      "frequencies, row count and column medians (its fill for missing values)"}


class TreeCircuit:
    """The FC[DT] model: one root over each client's ``Expert`` p_k(label | x_k). ``combine``
    "mean" gives p(label | x) = sum_k w_k p_k / sum_k w_k (w_k: rows); "product" gives
    p(label | x) proportional to r(x) prod_k p_k / r(x), each expert's probabilities mixed with
    r (PRIOR_MIX), where the reference r is p(label | shared columns), the row-weighted mean of
    the clients' ``references`` (hybrid: the product of experts on blocks that are independent
    given the label and the columns every client holds), or the label's prior when there are
    none (vertical)."""

    density: Literal[False] = False  # a classifier: p(label | x) only (FedPC's FedPC is a density)
    method: ClassVar[str] = "fcdt"  # the server procedure that fits it (``fedpgm.fedpc.procedure``)

    def __init__(self, experts: dict[str, Expert], schema: Schema, info: dict | None = None,
                 combine: str = "mean", references: dict[str, Expert] | None = None) -> None:
        if combine not in COMBINES[1:]:
            raise FedpgmError(f"unknown FC[DT] root '{combine}'; use mean or product")
        if schema.label is None:
            raise FedpgmError("an FC[DT] model needs a schema with its label")
        self.experts, self.schema, self.combine = experts, schema, combine
        self.label, self.classes = schema.label, list(schema[schema.label].states)
        self.references = references or {}
        self.info = info or {}

    @staticmethod
    def mean(experts: dict[str, Expert], frame: pd.DataFrame) -> np.ndarray:
        """(rows, K): the row-weighted mean of the experts' class probabilities."""
        total = sum(e.weight for e in experts.values())
        out = np.zeros((len(frame), len(next(iter(experts.values())).prior)))
        for client, expert in experts.items():
            missing = [c for c in expert.columns if c not in frame.columns]
            if missing:
                raise FedpgmError(f"the rows lack column(s) {missing} that client '{client}'s trees use")
            out += expert.weight / total * expert.predict_proba(frame[expert.columns].to_numpy(dtype=float))
        return out

    def predict_proba(self, frame: pd.DataFrame, target: str | None = None) -> np.ndarray:
        """(rows, K) class probabilities; ``frame`` needs every column an expert uses; ``target``
        (the estimator API's argument) may only name the label."""
        if target is not None and target != self.label:
            raise FedpgmError(f"this FC[DT] model predicts only its label '{self.label}', not '{target}'")
        if self.combine == "mean":
            return self.mean(self.experts, frame)
        if self.references:
            ref = np.maximum(self.mean(self.references, frame), 1e-12)
        else:
            total = sum(e.weight for e in self.experts.values())
            ref = np.maximum(sum(e.weight / total * e.prior for e in self.experts.values()), 1e-12)
        out = np.log(ref) * np.ones((len(frame), 1))
        for client, expert in self.experts.items():
            p = self.mean({client: expert}, frame)
            out += np.log((1 - PRIOR_MIX) * p + PRIOR_MIX * ref) - np.log(ref)
        out = np.exp(out - out.max(axis=1, keepdims=True))
        return out / out.sum(axis=1, keepdims=True)

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return self.predict_proba(frame).argmax(axis=1)

    def save(self, folder: str | Path) -> None:
        """``trees.json`` (structure) + ``trees.npz`` (arrays), written atomically."""
        meta = {"format": FORMAT, "schema": self.schema.to_dict(), "info": self.info, "combine": self.combine,
                "experts": [{"client": c, **e.meta()} for c, e in self.experts.items()],
                "references": [{"client": c, **e.meta()} for c, e in self.references.items()]}
        arrays = {k: v for i, e in enumerate(self.experts.values()) for k, v in e.arrays(f"{i}_").items()}
        arrays |= {k: v for i, e in enumerate(self.references.values()) for k, v in e.arrays(f"r{i}_").items()}
        with atomic_folder(folder) as tmp:
            np.savez(tmp / "trees.npz", **cast(dict[str, Any], arrays))  # (names, not savez's options)
            meta["arrays"] = file_record(tmp / "trees.npz")
            (tmp / "trees.json").write_text(json.dumps(seal(meta), indent=1))

    @staticmethod
    def load(folder: str | Path) -> "TreeCircuit":
        folder = Path(folder)
        where = f"{folder}/trees.json"
        if not (folder / "trees.json").is_file():
            raise FedpgmError(f"{folder} is not an FC[DT] model folder (trees.json is missing)")
        meta = read_json(folder / "trees.json")
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            found = meta.get("format") if isinstance(meta, dict) else None
            raise FedpgmError(f"{where} is not an FC[DT] model of this version (format {found!r}, expected "
                              f"{FORMAT!r}); fit it again")
        check_seal(meta, where)
        check_document(meta, where)
        try:
            check_file(folder / "trees.npz", meta["arrays"], str(folder))
            with np.load(folder / "trees.npz", allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}  # (-inf scores and NaN fills are legitimate here)
        except FileNotFoundError as e:
            raise FedpgmError(f"{folder} is not an FC[DT] model folder ({e.filename} is missing)") from None
        except (ValueError, OSError, zipfile.BadZipFile) as e:
            raise FedpgmError(f"{folder}: damaged FC[DT] files ({e})") from None
        combine = meta["combine"]
        if combine not in COMBINES[1:]:
            raise FedpgmError(f"{where}: unknown FC[DT] root {combine!r}; expected mean or product")
        try:
            schema = Schema.from_dict(meta["schema"])
        except (KeyError, TypeError, ValueError) as e:
            raise FedpgmError(f"{where}: damaged schema ({e!r})") from None
        if schema.label is None:
            raise BadModelFile(f"{where}: field 'schema.label' is missing; an FC[DT] model has a label")
        k = schema.label_feature.cardinality
        entries = {"": meta["experts"], "r": meta["references"]}
        loaded: dict[str, dict] = {}
        for tag, listed in entries.items():
            loaded[tag] = {}
            for i, entry in enumerate(listed):
                what = f"{folder}, {'reference of ' if tag else 'client '}'{entry.get('client')}'"
                expert = Expert.from_arrays(arrays, entry, k, what, f"{tag}{i}_")
                unknown = [c for c in expert.columns if c not in schema.names or c == schema.label]
                if unknown:
                    raise FedpgmError(f"{what}: column(s) {unknown} are not features of the model's schema")
                loaded[tag][entry.get("client")] = expert
        return TreeCircuit(loaded[""], schema, meta.get("info"), combine, loaded["r"])


def check_document(meta: dict, where: str) -> None:
    """Every field of a ``trees.json`` typed and bounded before any array is read: a crafted file
    is refused naming its field (``BadModelFile``)."""
    check_keys(meta, where, "document", ("format", "schema", "info", "combine", "experts", "references", "arrays",
                                         SEAL))
    need(meta["info"], dict, where, "info")
    need(meta["combine"], str, where, "combine")
    check_schema_doc(meta["schema"], where)
    features = len(meta["schema"]["features"])
    for group in ("experts", "references"):
        for i, entry in enumerate(need_list(meta[group], where, group)):
            name = f"{group}[{i}]"
            check_keys(entry, where, name, ("client", "columns", "weight", "ensemble", "trees", "min_samples_leaf"))
            need(entry["client"], str, where, f"{name}.client")
            need(entry["ensemble"], str, where, f"{name}.ensemble")
            need_list(entry["columns"], where, f"{name}.columns", str)
            if len(entry["columns"]) > features:
                raise BadModelFile(f"{where}: field '{name}.columns' lists more columns than the schema has")
            need_float(entry["weight"], where, f"{name}.weight", 0.0)
            need_int(entry["trees"], where, f"{name}.trees", 0, MAX_TREES)
            if entry["min_samples_leaf"] is not None:
                need_int(entry["min_samples_leaf"], where, f"{name}.min_samples_leaf", 1)


def plan_root(schemas: dict[str, Schema], combine: str, ensemble: str) -> tuple[str, list[str]]:
    """The root over the label holders' ``schemas`` and, for a product, the columns every holder
    shares (its reference's columns; none in a vertical federation). A product needs at least two
    holders whose columns outside the shared ones are disjoint. "auto": a product there when no
    column is shared (vertical) or the experts are boosted (calibrated: on hybrid adult, seed 0,
    accuracy / macro-F1 0.863 / 0.803 against the mean's 0.862 / 0.787, while bagged trees lose
    accuracy under it: 0.831 vs 0.842), else the mean."""
    first = next(iter(schemas.values())).feature_names
    shared = [c for c in first if all(c in s.feature_names for s in schemas.values())] if len(schemas) > 1 else []
    private = [set(s.feature_names) - set(shared) for s in schemas.values()]
    separable = sum(1 for p in private if p) >= 2 and sum(map(len, private)) == len(set().union(*private))
    if combine == "auto":
        combine = "product" if separable and (not shared or ensemble == "boosting") else "mean"
    if combine == "product" and not separable:
        raise FedpgmError("a product root needs at least two label holders whose columns outside those they all "
                          "share are disjoint (vertical or hybrid); use --tree-root mean")
    return combine, shared if combine == "product" else []


def check_fcdt(max_depth: int | None, min_samples_leaf: int | None, combine: str, trees: int | None,
               ensemble: str) -> int:
    """``fit_fcdt``'s settings checked (one-line ``FedpgmError``s); the trees per client (None:
    the ensemble's default)."""
    if combine not in COMBINES:
        raise FedpgmError(f"unknown FC[DT] root '{combine}'; use one of {list(COMBINES)}")
    if ensemble not in ENSEMBLES:
        raise FedpgmError(f"unknown FC[DT] ensemble '{ensemble}'; use one of {list(ENSEMBLES)}")
    if (min_samples_leaf is not None and min_samples_leaf < 1) or (max_depth is not None and max_depth < 1):
        raise FedpgmError("FC[DT] needs min_samples_leaf >= 1 (or none: chosen for the root) and "
                          "max_depth >= 1 (or none)")
    trees = (1 if ensemble == "bagging" else BOOSTING_STAGES) if trees is None else trees
    if not isinstance(trees, int) or trees < 1:
        raise FedpgmError(f"--trees {trees}: each client fits at least 1 tree")
    return trees


def fit_fcdt(fed: Federation, max_depth: int | None = None, min_samples_leaf: int | None = None,
             seed: int = 0, combine: str = "auto", trees: int | None = None,
             ensemble: str = "bagging", align: str = "none") -> TreeCircuit:
    """FC[DT] in one round: every client holding the label fits its expert (``ensemble``
    "bagging": ``trees`` classification trees, default 1, more on bootstrap resamples;
    "boosting": gradient-boosted trees, at most ``trees`` stages, default ``BOOSTING_STAGES``)
    and, under a product root over hybrid clients, a reference expert on the shared columns; the
    server joins them (``combine``: ``plan_root``; bagging with ``min_samples_leaf`` None: 5
    under a mean root, each client's cross-validated choice under a product root); ``align``
    "psi": private row alignment first (``fedpgm.federation.psi``)."""
    trees = check_fcdt(max_depth, min_samples_leaf, combine, trees, ensemble)
    alignment = align_rows(fed) if check_align(align) == "psi" else None
    t0 = time.perf_counter()
    described = fed.broadcast("describe").require_all()
    schemas = {c: Schema.from_dict(m.config["schema"]) for c, m in described.items()}
    labels = {s.label for s in schemas.values() if s.label is not None}
    if len(labels) > 1:
        raise FedpgmError(f"clients name different labels {sorted(labels)}; agree on one")
    holders = [c for c, s in schemas.items() if s.label is not None]
    if not holders:
        raise FedpgmError("no client holds the label; FC[DT] trains on labelled rows (give the label to "
                          "one client or all: --label-to)")
    combine, shared = plan_root({c: schemas[c] for c in holders}, combine, ensemble)
    if min_samples_leaf is None and combine == "mean" and ensemble == "bagging":
        min_samples_leaf = BAGGING_LEAF
    replies = fed.broadcast("fit_tree", config={"max_depth": max_depth, "min_samples_leaf": min_samples_leaf,
                                                "seed": seed, "trees": trees, "ensemble": ensemble,
                                                "reference_columns": shared},
                            clients=holders).require_all()
    fitted = {c: expert_from_message(m, f"client '{c}'") for c, m in sorted(replies.items())}
    experts = {c: e for c, (e, _) in fitted.items()}
    references = {c: r for c, (_, r) in fitted.items() if r is not None}
    if shared and len(references) != len(experts):
        raise FedpgmError(f"clients {sorted(set(experts) - set(references))} sent no reference expert on the "
                          "shared columns")
    label = labels.pop()
    features = {f.name: f for c in holders for f in schemas[c].features}  # every holder's columns, once
    schema = Schema(tuple(features[n] for n in dict.fromkeys(n for c in holders for n in schemas[c].names)), label)
    client_seconds = {c: float(m.config["seconds"]) for c, m in replies.items()}
    info = {"clients_with_trees": sorted(experts), "ensemble": ensemble, "trees_per_client": trees,
            "trees_fitted": {c: len(e.trees) for c, e in experts.items()}, "reference_columns": shared,
            "train_seconds": time.perf_counter() - t0, "client_seconds": client_seconds, "combine": combine,
            "min_samples_leaf": {c: e.min_samples_leaf for c, e in experts.items()},
            "critical_path_seconds": max(client_seconds.values()),
            "communication": fed.ledger.totals(), "shared_with_server": SHARED[ensemble],
            "single_class_clients": sorted(c for c, e in experts.items() if np.count_nonzero(e.prior) < 2)}
    policy = {c: m.config["policy"] for c, m in replies.items() if "policy" in m.config}
    if policy:
        info["client_policy"] = policy  # what each client's own privacy policy changed
    if alignment is not None:
        info["alignment"] = alignment
    return TreeCircuit(experts, schema, info, combine, references)
