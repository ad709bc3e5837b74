"""A learned FedPC and its queries, in either placement.

- ``server`` placement: the clients sent their circuits; ``circuit`` is the assembled FedPC
  (one valid circuit) and every exact query works offline: log-likelihoods, marginals (NaN =
  unobserved), conditionals, class probabilities, MPE, sampling.
- ``split`` placement: the client circuits stay at the clients and only the plan is at the
  server. Log-likelihoods, marginals, conditionals and class probabilities are answered by one
  batched ``loglik`` round (each client gets only the columns it holds and returns per-row
  log-likelihoods of its circuits), with the same numbers as the server placement. If a client is
  unreachable, its columns are marginalised and ``notes`` says so.

Files: ``fedpc.json`` (plan, schema, fit report, the records of the circuit files, its own
checksum) and, for server placement, the assembled circuit as ``circuit/structure.json`` +
``circuit/params.safetensors`` (or the dense client circuits under ``components/``); nothing
is pickled, and every field is checked on load (``FedPC.load``).
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from scipy.special import logsumexp

from fedpgm.circuits import queries
from fedpgm.circuits.compiled import CompiledCircuit
from fedpgm.circuits.dense import DenseCircuit
from fedpgm.circuits.learners import log_likelihood_of
from fedpgm.circuits.estimator import as_matrix
from fedpgm.circuits.semiring import Semiring
from fedpgm.circuits.io import STRUCTURE, load_circuit, save_circuit
from fedpgm.circuits.structure import Circuit
from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.model_files import (SEAL, BadModelFile, check_file, check_keys, check_seal, file_record, need,
                                need_float, need_int, need_list, read_json, schema_of, seal)
from fedpgm.federation.base import Federation
from fedpgm.fedpc.plan import Plan, combine
from fedpgm.files import atomic_folder

FORMAT = "fedpgm-fedpc/1"


class FedPC:
    """A federated circuit: ``plan`` (network side) plus the assembled ``circuit`` or live clients."""

    density: Literal[True] = True  # a joint density (log-likelihoods, marginals, MPE); FC[DT]'s TreeCircuit is not
    method: ClassVar[str] = "fedpc"  # the server procedure that fits it (``fedpgm.fedpc.procedure``)

    def __init__(self, schema: Schema, plan: Plan, circuit: Circuit | None = None, info: dict | None = None,
                 federation: Federation | None = None, components: list[DenseCircuit] | None = None) -> None:
        self.schema, self.plan, self.circuit = schema, plan, circuit
        self.components = components  # dense client circuits at the server, combined by the plan
        self.info = info or {}
        self.federation = federation  # needed by split placement only
        self.notes: list[str] = []  # what the last split query had to marginalise

    @property
    def placement(self) -> str:
        return "server" if self.circuit is not None or self.components is not None else "split"

    @cached_property
    def compiled(self) -> CompiledCircuit:
        return CompiledCircuit(self.need_circuit("this query"))

    def need_circuit(self, what: str) -> Circuit:
        if self.components is not None:
            raise FedpgmError(f"{what} needs one assembled node circuit; this FedPC's client circuits are dense "
                              "(learner pd): use complete() (inpainting) or sample()")
        if self.circuit is None:
            raise FedpgmError(f"{what} needs the assembled model, but this FedPC is split across its "
                              "clients; fit with --placement server")
        return self.circuit

    # -- queries ------------------------------------------------------------------------------
    def log_likelihood(self, X) -> np.ndarray:
        """(rows,) log p(observed values) in nats; NaN or absent columns are marginalised."""
        X = as_matrix(X, self.schema)
        if self.circuit is not None:
            return queries.log_likelihood(self.compiled, X)
        if self.components is not None:
            return combine(self.plan, self.component_log_likelihoods(X))
        return self.split_log_likelihood(X)

    def component_log_likelihoods(self, X: np.ndarray) -> np.ndarray:
        """(rows, components) log-likelihoods of the dense client circuits held here."""
        if self.components is None:
            raise FedpgmError("this FedPC holds no dense client circuits")
        return np.column_stack([log_likelihood_of(c, self.schema.names, X) for c in self.components])

    def score(self, X) -> float:
        return float(self.log_likelihood(X).mean())

    def predict_proba(self, X, target: str | None = None) -> np.ndarray:
        """(rows, k) p(target = c | the other observed columns); target defaults to the label."""
        target = target or self.schema.label
        if target is None:
            raise FedpgmError("classification needs a target; the data has no label, pass target=")
        if target not in self.schema:
            raise FedpgmError(f"no client holds '{target}', so the FedPC cannot classify it; "
                              f"its variables are {self.schema.names}")
        t = self.schema.index(target)
        X = as_matrix(X, self.schema)
        if self.circuit is not None:
            return queries.predict_proba(self.compiled, X, target)
        return queries.class_posterior(self.log_likelihood, X, self.schema.features[t], t)

    def predict(self, X, target: str | None = None) -> np.ndarray:
        return self.predict_proba(X, target).argmax(axis=1)

    def conditional(self, X, query: list[str]) -> np.ndarray:
        """(rows,) log p(query columns | the other observed columns)."""
        X = as_matrix(X, self.schema)
        self.schema.check_names(query)
        q = [self.schema.index(n) for n in query]
        evidence = X.copy()
        evidence[:, q] = np.nan
        return self.log_likelihood(X) - self.log_likelihood(evidence)

    def mpe(self, X) -> np.ndarray:
        self.need_circuit("MPE")
        return queries.mpe(self.compiled, as_matrix(X, self.schema))

    def sample(self, n: int | None = None, evidence=None, seed: int = 0) -> np.ndarray:
        if self.components is not None:
            return self.complete(np.full((n or 1, len(self.schema)), np.nan) if evidence is None else evidence,
                                 "sample", seed)
        self.need_circuit("sampling")
        ev = None if evidence is None else as_matrix(evidence, self.schema)
        return queries.sample(self.compiled, n, ev, seed)

    def complete(self, X, how: Semiring | str = Semiring.SUM, seed: int = 0) -> np.ndarray:
        """(rows, columns) X with NaN filled, for dense client circuits: a product, then a circuit
        per subspace, are drawn from their posterior given the observed entries (or the most
        probable, ``Semiring.MAX``), then each chosen circuit fills its columns (``DenseCircuit.select``)."""
        if self.components is None:
            raise FedpgmError("complete() is for FedPCs of dense client circuits; use sample(evidence=...)")
        X = as_matrix(X, self.schema).copy()
        how = Semiring.of(how)
        gen = torch.Generator().manual_seed(seed)

        def pick(logits: np.ndarray) -> np.ndarray:  # (rows, options) -> (rows,)
            return how.choose(torch.from_numpy(logits), gen).numpy()

        comp = self.component_log_likelihoods(X)
        alt_ll = [[logsumexp(comp[:, a.components] + np.log(a.weights), axis=1) for a in alts]
                  for alts in self.plan.alternatives]
        prod_ll = np.stack([sum(alt_ll[j][a] for j, a in enumerate(p)) for p in self.plan.products], 1)
        chosen = pick(prod_ll + np.log(self.plan.product_weights))
        out = X.copy()
        for j, alts in enumerate(self.plan.alternatives):
            alt = np.array([self.plan.products[p][j] for p in chosen])
            for a_index, a in enumerate(alts):
                rows = np.flatnonzero(alt == a_index)
                if not len(rows):
                    continue
                which = np.asarray(a.components)[pick(comp[rows][:, a.components] + np.log(a.weights))]
                for c in np.unique(which):
                    sub = rows[which == c]
                    circuit = self.components[c]
                    cols = [self.schema.index(n) for n in circuit.schema.names]
                    out[np.ix_(sub, cols)] = circuit.complete(X[np.ix_(sub, cols)], how, seed + int(c))
        return out

    def split_log_likelihood(self, X: np.ndarray) -> np.ndarray:
        """One ``loglik`` round: clients evaluate their circuits on their columns of X."""
        fed = self.federation
        if fed is None:
            raise FedpgmError("this FedPC is split across its clients and no federation is attached")
        X = np.asarray(X, dtype=float)
        holders = list(dict.fromkeys(c["client"] for c in self.plan.components))
        per_client = {}
        for client in holders:
            cols = [n for s in self.plan.subspaces if client in s["clients"] for n in s["features"]]
            idx = [self.schema.index(n) for n in cols]
            per_client[client] = ({"X": np.ascontiguousarray(X[:, idx])}, {"columns": cols})
        replies = fed.broadcast("loglik", clients=holders, per_client=per_client)
        component_ll = np.full((len(X), len(self.plan.components)), np.nan)
        for client, msg in replies.messages.items():
            index = {self.plan.components[i]["key"]: i for i in self.plan.of_client(client)}
            for j, key in enumerate(msg.config["keys"]):
                component_ll[:, index[key]] = msg.arrays["loglik"][:, j]
        self.notes = [f"client '{c}' unreachable ({f.kind}); its circuits were left out and the "
                      f"columns only it holds marginalised" for c, f in replies.failures.items()]
        if len(replies.failures) == len(holders):
            raise FedpgmError("no client answered the query; " + "; ".join(self.notes))
        return combine(self.plan, component_ll)

    # -- files --------------------------------------------------------------------------------
    def save(self, folder) -> Path:
        """``fedpc.json`` + the assembled circuit (server placement) or the dense client circuits,
        replaced atomically; ``fedpc.json`` records each circuit's ``structure.json`` (size and
        SHA-256, which in turn records its arrays) and its own checksum (``seal``)."""
        folder = Path(folder)
        doc: dict[str, Any] = {"format": FORMAT, "schema": self.schema.to_dict(), "plan": self.plan.to_dict(),
                               "placement": self.placement, "info": self.info}
        with atomic_folder(folder) as tmp:
            if self.components is not None:
                doc["components"] = len(self.components)
                for i, c in enumerate(self.components):
                    save_circuit(c, tmp / "components" / f"{i:04d}")
            if self.circuit is not None:
                save_circuit(self.circuit, tmp / "circuit")
            doc["files"] = {name: file_record(tmp / name) for name in part_files(doc)}
            (tmp / "fedpc.json").write_text(json.dumps(seal(doc), indent=1) + "\n")
        return folder

    @classmethod
    def load(cls, folder) -> "FedPC":
        """The FedPC saved in ``folder``; every field of ``fedpc.json`` is checked (types, the plan
        against the schema, the circuits' records) before any circuit is read."""
        folder = Path(folder)
        path = folder / "fedpc.json"
        if not path.is_file():
            raise FedpgmError(f"{folder} has no fedpc.json; pass a folder written by `fedpgm fedpc fit --out`")
        doc, where = read_json(path), str(path)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise FedpgmError(f"{path} is not a {FORMAT} file")
        check_keys(doc, where, "document", ("format", "schema", "plan", "placement", "info"),
                   ("components", "files", SEAL))
        schema = schema_of(doc["schema"], where)
        plan = plan_of(doc["plan"], schema, where)
        need(doc["info"], dict, where, "info", "an object")
        if doc["placement"] not in ("server", "split"):
            raise BadModelFile(f"{where}: field 'placement' must be 'server' or 'split', "
                               f"got {repr(doc['placement'])[:40]}")
        if "components" in doc:
            need_int(doc["components"], where, "components", len(plan.components), len(plan.components))
        check_parts(folder, doc, where)
        check_seal(doc, where)
        if "components" in doc:  # dense client circuits, combined by the plan
            loaded = [load_circuit(folder / "components" / f"{i:04d}")[0] for i in range(doc["components"])]
            components = [c for c in loaded if c.dense]
            if len(components) != len(loaded) or any(
                    c.schema is None or not set(c.schema.names) <= set(schema.names) for c in components):
                raise FedpgmError(f"{folder}: the saved client circuits do not match fedpc.json's plan and schema")
            return cls(schema, plan, None, doc["info"], components=components)
        circuit = load_circuit(folder / "circuit")[0] if doc["placement"] == "server" else None
        if circuit is not None and (circuit.dense or circuit.schema.names != schema.names):
            raise FedpgmError(f"{folder}: the circuit's variables differ from fedpc.json's schema")
        return cls(schema, plan, circuit, doc["info"])


def part_files(doc: dict) -> list[str]:
    """The circuit documents a ``fedpc.json`` records, relative to its folder."""
    if "components" in doc:
        return [f"components/{i:04d}/{STRUCTURE}" for i in range(doc["components"])]
    return [f"circuit/{STRUCTURE}"] if doc["placement"] == "server" else []


def check_parts(folder: Path, doc: dict, where: str) -> None:
    """Each circuit document the model has matches the size and SHA-256 ``files`` records."""
    names = part_files(doc)
    records = doc.get("files")
    if not isinstance(records, dict) or sorted(records) != sorted(names):
        raise BadModelFile(f"{where}: field 'files' must record exactly {names[:3]}{' ...' if len(names) > 3 else ''} "
                           "(written by an older fedpgm, or edited); fit the model again")
    for name in names:
        if not (folder / name).is_file():
            raise FedpgmError(f"{folder} has no {name}; the model folder is incomplete")
        check_file(folder / name, records[name], where)


def plan_of(doc, schema: Schema, where: str) -> Plan:
    """The plan of a ``fedpc.json``, every field's type checked, its features in ``schema``."""
    check_keys(doc, where, "plan", ("subspaces", "components", "alternatives", "products", "product_weights"))
    subspaces = need_list(doc["subspaces"], where, "plan.subspaces")
    for j, s in enumerate(subspaces):
        check_keys(s, where, f"plan.subspaces[{j}]", ("features", "clients"))
        unknown = [f for f in need_list(s["features"], where, f"plan.subspaces[{j}].features", str) if f not in schema]
        if unknown:
            raise BadModelFile(f"{where}: field 'plan.subspaces[{j}].features' names {unknown[:3]}, not in the schema")
        need_list(s["clients"], where, f"plan.subspaces[{j}].clients", str)
    for i, c in enumerate(need_list(doc["components"], where, "plan.components")):
        check_keys(c, where, f"plan.components[{i}]", ("client", "key", "subspace", "n"))
        need(c["client"], str, where, f"plan.components[{i}].client")
        need(c["key"], str, where, f"plan.components[{i}].key")
        need_int(c["subspace"], where, f"plan.components[{i}].subspace", 0, len(subspaces) - 1)
        need_int(c["n"], where, f"plan.components[{i}].n")
    alternatives = need_list(doc["alternatives"], where, "plan.alternatives", list, len(subspaces))
    for j, alts in enumerate(alternatives):
        for k, a in enumerate(alts):
            name = f"plan.alternatives[{j}][{k}]"
            check_keys(a, where, name, ("components", "weights"))
            need_list(a["components"], where, f"{name}.components", int)
            for w, x in enumerate(need_list(a["weights"], where, f"{name}.weights", float)):
                need_float(x, where, f"{name}.weights[{w}]", 0.0)
    for p, product in enumerate(need_list(doc["products"], where, "plan.products", list)):
        need_list(product, where, f"plan.products[{p}]", int)
    for p, x in enumerate(need_list(doc["product_weights"], where, "plan.product_weights", float)):
        need_float(x, where, f"plan.product_weights[{p}]", 0.0)
    try:
        plan = Plan.from_dict(doc)
    except FedpgmError as e:
        raise BadModelFile(f"{where}: field 'plan': {e}") from None
    check_plan_fits(plan, schema, where)
    return plan


def check_plan_fits(plan: Plan, schema: Schema, where: str) -> None:
    """As ``fit_fedpc`` builds a plan: the subspaces split the schema's features, each component
    is of a client holding its subspace, and each subspace's alternatives use its components."""
    features = [f for s in plan.subspaces for f in s["features"]]
    if sorted(features) != sorted(schema.names):
        raise BadModelFile(f"{where}: field 'plan.subspaces' does not split the schema's features in parts")
    for i, c in enumerate(plan.components):
        if c["client"] not in plan.subspaces[c["subspace"]]["clients"]:
            raise BadModelFile(f"{where}: field 'plan.components[{i}].client' does not hold its subspace")
    for j, alts in enumerate(plan.alternatives):
        if any(plan.components[i]["subspace"] != j for a in alts for i in a.components):
            raise BadModelFile(f"{where}: field 'plan.alternatives[{j}]' uses another subspace's components")
