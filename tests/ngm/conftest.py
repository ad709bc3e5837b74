"""Mixed data with a known graph: a -> b -> c (numeric), k depends on c (categorical), z apart."""

import numpy as np
import pandas as pd
import pytest

from fedpgm.data.schema import Feature, Schema
from fedpgm.ngm.graph import from_edges

SCHEMA = Schema((Feature("a", "continuous"), Feature("b", "continuous"), Feature("c", "continuous"),
                 Feature("k", "categorical", ("lo", "mid", "hi")), Feature("z", "continuous")))
EDGES = [["a", "b"], ["b", "c"], ["c", "k"]]


def chain_frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a = rng.normal(0, 1, n)
    b = 0.9 * a + rng.normal(0, 0.45, n)
    c = -0.8 * b + rng.normal(0, 0.5, n)
    k = np.digitize(c + rng.normal(0, 0.3, n), [-0.6, 0.6]).astype(float)
    z = rng.normal(5, 2, n)
    return pd.DataFrame({"a": a, "b": b, "c": c, "k": k, "z": z})


@pytest.fixture(scope="session")
def chain():
    """(train, test, schema, graph)."""
    return chain_frame(3000, 0), chain_frame(1000, 1), SCHEMA, from_edges(SCHEMA.names, EDGES)


@pytest.fixture(scope="session")
def chain_model(chain):
    from fedpgm.ngm.model import NGM, NGMSettings

    train, _, schema, graph = chain
    return NGM.fit(train, schema, graph, NGMSettings(hidden=32, epochs=150, seed=0))
