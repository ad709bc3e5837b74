"""The ``Dataset`` every loader returns, and the shared steps loaders use to build one.

Missing values: each loader has a policy, ``keep`` (NaN stays in the table, for models that
marginalise missing values, such as circuits) or ``impute`` (median for continuous columns,
most frequent code for discrete ones, both computed on the training rows only and applied to
every split). Labels are never imputed: rows without a label are dropped by the loader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from fedpgm.data.schema import ROW_ID, Schema
from fedpgm.errors import FedpgmError

if TYPE_CHECKING:
    import networkx as nx

MissingPolicy = Literal["keep", "impute"]
MISSING_POLICIES = ("keep", "impute")


@dataclass
class Dataset:
    """A table split into train/test (and an optional validation part), plus its schema.

    Frames are ``float64`` with one column per schema feature (codes for discrete ones) and
    the index ``row_id`` (unique across all splits).
    """

    name: str
    schema: Schema
    train: pd.DataFrame
    test: pd.DataFrame
    valid: pd.DataFrame | None = None
    graph: nx.DiGraph | None = None  # the generating DAG, for Bayesian-network datasets
    truth: Any = None  # ground truth of synthetic data (has ``log_density(frame)``)
    info: dict[str, str] = field(default_factory=dict)  # source, split and missing policy

    def __post_init__(self) -> None:
        for part, frame in self.parts().items():
            self.schema.validate_frame(frame, f"{self.name} {part}")

    def parts(self) -> dict[str, pd.DataFrame]:
        out = {"train": self.train, "test": self.test}
        if self.valid is not None:
            out["valid"] = self.valid
        return out

    @property
    def n_rows(self) -> int:
        return sum(len(f) for f in self.parts().values())

    def features(self, part: str = "train") -> np.ndarray:
        """The non-label columns of one part, shape (rows, features)."""
        return self.parts()[part][self.schema.feature_names].to_numpy()

    def labels(self, part: str = "train") -> np.ndarray:
        """The label column of one part as integer codes (discrete) or floats, shape (rows,)."""
        if self.schema.label is None:
            raise FedpgmError(f"dataset '{self.name}' has no label; pick one with --label")
        y = self.parts()[part][self.schema.label].to_numpy()
        return y.astype(int) if self.schema[self.schema.label].discrete else y

    def with_label(self, label: str | None) -> "Dataset":
        return replace(self, schema=self.schema.with_label(label))

    def drop_label(self) -> "Dataset":
        """The same rows without the label column (density models of the features alone)."""
        if self.schema.label is None:
            return self
        keep = self.schema.select(self.schema.feature_names)
        parts = {k: v[keep.names] for k, v in self.parts().items()}
        return replace(self, schema=keep, train=parts["train"], test=parts["test"], valid=parts.get("valid"))


def table(values: np.ndarray | dict, names: list[str], row_ids: np.ndarray | None = None) -> pd.DataFrame:
    """A float table with the ``row_id`` index (0..n-1 unless given)."""
    frame = pd.DataFrame(values, columns=names).astype(float)
    frame.index = pd.Index(np.arange(len(frame)) if row_ids is None else row_ids, name=ROW_ID)
    return frame


def random_split(
    frame: pd.DataFrame, schema: Schema, seed: int, test_size: float = 0.2
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split rows into train/test by ``seed``, stratified by a discrete label when possible.

    ``test_size``: a fraction in (0, 1) or a whole number of test rows.
    """
    if float(test_size).is_integer() and test_size >= 1:
        test_size = int(test_size)
        if test_size >= len(frame):
            raise FedpgmError(f"test_size {test_size} leaves no training rows (table has {len(frame)})")
    elif not 0.0 < test_size < 1.0:
        raise FedpgmError(f"test_size must be a fraction in (0, 1) or a row count, got {test_size}")
    if len(frame) < 2:
        raise FedpgmError(f"a table of {len(frame)} row(s) cannot be split into train and test rows; give more rows")
    n_test = test_size if isinstance(test_size, int) else math.ceil(test_size * len(frame))
    stratify = None
    if schema.label is not None and schema[schema.label].discrete:
        counts = frame[schema.label].value_counts()
        # (a stratified split needs two rows per class and room for every class on both sides)
        if counts.min() >= 2 and min(n_test, len(frame) - n_test) >= len(counts):
            stratify = frame[schema.label]
    from sklearn.model_selection import train_test_split  # (0.8 s to import: only where a split is made)

    train, test = train_test_split(frame, test_size=test_size, random_state=seed, stratify=stratify)
    return train.sort_index(), test.sort_index()


def impute(parts: dict[str, pd.DataFrame], schema: Schema) -> dict[str, pd.DataFrame]:
    """Fill NaN in every part with train medians (continuous) or train modes (discrete)."""
    train = parts["train"]
    fill = {}
    for f in schema.features:
        if f.name == schema.label:
            continue
        col = train[f.name].dropna()
        if col.empty:
            raise FedpgmError(f"column '{f.name}' has no training values to impute from; drop it")
        fill[f.name] = float(col.mode().iloc[0]) if f.discrete else float(col.median())
    return {k: v.fillna(value=fill) for k, v in parts.items()}


def apply_missing_policy(
    parts: dict[str, pd.DataFrame], schema: Schema, policy: str
) -> dict[str, pd.DataFrame]:
    """Apply ``keep`` or ``impute`` (see the module docstring)."""
    if policy not in MISSING_POLICIES:
        raise FedpgmError(f"missing-value policy '{policy}' is unknown; use one of {MISSING_POLICIES}")
    return impute(parts, schema) if policy == "impute" else parts
