"""``bn:NETWORK``: rows forward-sampled from the Bayesian networks shipped inside pgmpy's wheel.

The ``.bif.gz`` files are read from the installed package (``pgmpy/utils/example_models``);
nothing is downloaded (pgmpy's newer ``load_model`` would fetch from a hub). States are
integer-coded in the order the network file lists them, and the DAG is ``Dataset.graph``.
"""

from __future__ import annotations

import gzip
import re
import warnings
from functools import lru_cache
from importlib.resources import files
from importlib.resources.abc import Traversable

import pandas as pd

from fedpgm.data.dataset import Dataset
from fedpgm.data.loaders import finish
from fedpgm.data.registry import LoadOptions, register
from fedpgm.data.schema import ROW_ID, Feature, Schema
from fedpgm.errors import FedpgmError

DEFAULT_ROWS = 10_000
# The prediction targets used for these networks in the F-CM paper (Appendix B).
DEFAULT_TASKS = {"asia": "dysp", "sachs": "Akt", "alarm": "BP", "insurance": "PropCost",
                 "hailfinder": "R5Fcst"}


def bundled_networks() -> dict[str, Traversable]:
    """Network name -> path of its ``.bif.gz`` inside the installed pgmpy."""
    root = files("pgmpy") / "utils" / "example_models"
    return {p.name[: -len(".bif.gz")]: p for p in root.iterdir() if p.name.endswith(".bif.gz")}


def network_text(name: str) -> str:
    nets = bundled_networks()
    if name not in nets:
        raise FedpgmError(f"unknown network '{name}'; pgmpy ships: {', '.join(sorted(nets))}")
    with nets[name].open("rb") as raw, gzip.open(raw) as fh:
        return fh.read().decode("utf-8")


@lru_cache(maxsize=8)
def read_network(name: str):
    """The pgmpy ``DiscreteBayesianNetwork`` of a bundled network (parsed once per process)."""
    with warnings.catch_warnings():  # pgmpy 1.1 warns about its own deprecations on import
        warnings.simplefilter("ignore", FutureWarning)
        import pgmpy.inference  # noqa: F401  (imported by simulate(): its import warns, so import it here)
        from pgmpy.readwrite import BIFReader  # takes seconds to import: only when needed

        return BIFReader(string=network_text(name)).get_model()


def network_schema(model, label: str | None) -> Schema:
    feats = []
    for node in model.nodes():
        states = tuple(str(s) for s in model.get_cpds(node).state_names[node])
        feats.append(Feature(node, "binary" if len(states) == 2 else "categorical", states))
    return Schema(tuple(feats), label)


def describe_network(name: str, options: LoadOptions) -> dict:
    """A cheap summary read from the BIF text, without parsing the network."""
    text = network_text(name)
    cards = [int(k) for k in re.findall(r"type\s+discrete\s*\[\s*(\d+)\s*\]", text)]
    kinds = {"binary": sum(c == 2 for c in cards), "categorical": sum(c != 2 for c in cards)}
    return {"rows": options.rows or DEFAULT_ROWS, "columns": len(cards),
            "types": {k: v for k, v in kinds.items() if v}, "label": DEFAULT_TASKS.get(name)}


@register("bn", "rows sampled from a Bayesian network bundled with pgmpy: bn:asia, bn:alarm, ... "
          f"(--rows, default {DEFAULT_ROWS})", family=True,
          options=("rows", "label", "test_size"), members=lambda o: sorted(bundled_networks()),
          describe=describe_network)
def load_bn(name: str, options: LoadOptions) -> Dataset:
    import networkx as nx  # (imported where a network is loaded, not with the package)

    model = read_network(name)
    label = options.label if options.label is not None else DEFAULT_TASKS.get(name)
    schema = network_schema(model, label)
    rows = options.rows or DEFAULT_ROWS
    sample = model.simulate(n_samples=rows, seed=options.seed, show_progress=False)
    codes = {}
    for feat in schema.features:
        lookup = {s: i for i, s in enumerate(feat.states)}
        codes[feat.name] = sample[feat.name].astype(str).map(lookup).astype(float).to_numpy()
    frame = pd.DataFrame(codes, columns=schema.names)
    frame.index.name = ROW_ID
    dataset = finish(f"bn:{name}", frame, schema, options, source="pgmpy bundled network",
                     sampling=f"forward sampling, {rows} rows, seed {options.seed}")
    dataset.graph = nx.DiGraph()
    dataset.graph.add_nodes_from(model.nodes())
    dataset.graph.add_edges_from(model.edges())
    return dataset
