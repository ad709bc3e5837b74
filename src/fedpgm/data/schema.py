"""Feature schemas: what each column of a table is.

A table in fedpgm is a ``pandas.DataFrame`` of ``float64`` indexed by ``row_id``. Continuous
columns hold their values; binary, categorical and ordinal columns hold integer codes
``0..k-1`` that index the feature's ``categories``; ``NaN`` marks a missing value. Feature
names are the identifiers by which clients recognise the same variable, so a schema insists
that they are unique.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Literal

import numpy as np
import pandas as pd

from fedpgm.errors import FedpgmError

Kind = Literal["continuous", "binary", "categorical", "ordinal"]
KINDS: tuple[str, ...] = ("continuous", "binary", "categorical", "ordinal")
ROW_ID = "row_id"


def canonical(value: object) -> str:
    """The string by which a raw value is matched to a category (``1.0`` and ``"1"`` agree)."""
    if isinstance(value, (bool, np.bool_)):
        return str(int(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    return str(value).strip()


@dataclass(frozen=True)
class Feature:
    """One column: its name, its kind and, for discrete kinds, its ordered categories."""

    name: str
    kind: Kind
    categories: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise FedpgmError(f"feature name {self.name!r} is empty; give every column a name")
        if self.name == ROW_ID:
            raise FedpgmError(f"'{ROW_ID}' is reserved for the row id; rename that feature")
        if self.kind not in KINDS:
            raise FedpgmError(
                f"feature '{self.name}' has unknown type '{self.kind}'; use one of {', '.join(KINDS)}"
            )
        if self.kind == "continuous":
            if self.categories is not None:
                raise FedpgmError(f"continuous feature '{self.name}' cannot have categories; drop them")
            return
        if self.categories is None:
            raise FedpgmError(f"{self.kind} feature '{self.name}' needs its list of categories")
        cats = tuple(canonical(c) for c in self.categories)
        object.__setattr__(self, "categories", cats)
        if len(set(cats)) != len(cats):
            raise FedpgmError(f"feature '{self.name}' lists a category twice: {list(cats)}")
        if self.kind == "binary" and len(cats) != 2:
            raise FedpgmError(
                f"binary feature '{self.name}' needs exactly 2 categories, got {len(cats)}; "
                "call it categorical instead"
            )
        if len(cats) < 1:
            raise FedpgmError(f"feature '{self.name}' has no categories")

    @property
    def discrete(self) -> bool:
        return self.kind != "continuous"

    @property
    def states(self) -> tuple[str, ...]:
        """The categories of a discrete feature, in code order (() for a continuous one)."""
        return self.categories or ()

    @property
    def cardinality(self) -> int:
        """Number of states of a discrete feature (0 for a continuous one)."""
        return len(self.categories) if self.categories is not None else 0

    def to_dict(self) -> dict:
        out: dict = {"name": self.name, "type": self.kind}
        if self.categories is not None:
            out["categories"] = list(self.categories)
        return out

    @staticmethod
    def from_dict(d: dict) -> "Feature":
        if not isinstance(d, dict) or "name" not in d or "type" not in d:
            raise FedpgmError(f"schema entry {d!r} needs 'name' and 'type'")
        cats = d.get("categories")
        return Feature(str(d["name"]), d["type"], tuple(cats) if cats is not None else None)


@dataclass(frozen=True)
class Schema:
    """An ordered set of uniquely named features and at most one label among them."""

    features: tuple[Feature, ...]
    label: str | None = None
    pixel_levels: int | None = None  # continuous ``pixel_ROW_COL`` columns hold integers 0..levels-1
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", tuple(self.features))
        names = [f.name for f in self.features]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise FedpgmError(
                f"duplicate feature names {dupes}; feature names identify variables across "
                "clients and must be unique"
            )
        object.__setattr__(self, "_index", {n: i for i, n in enumerate(names)})
        if self.label is not None and self.label not in self._index:
            raise FedpgmError(f"label '{self.label}' is not a column; choose one of {names}")
        if self.pixel_levels is not None and (not isinstance(self.pixel_levels, int) or self.pixel_levels < 2):
            raise FedpgmError(f"pixel_levels must be an integer >= 2, got {self.pixel_levels!r}")

    # -- look-ups -----------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [f.name for f in self.features]

    @property
    def label_feature(self) -> Feature:
        """The label's feature; a ``FedpgmError`` when the schema has no label."""
        if self.label is None:
            raise FedpgmError("the data has no label; name one (--label)")
        return self[self.label]

    @property
    def feature_names(self) -> list[str]:
        """All names but the label's."""
        return [f.name for f in self.features if f.name != self.label]

    def __len__(self) -> int:
        return len(self.features)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __getitem__(self, name: str) -> Feature:
        self.check_names([name])
        return self.features[self._index[name]]

    def index(self, name: str) -> int:
        self.check_names([name])
        return self._index[name]

    def check_names(self, names: Iterable[str]) -> None:
        unknown = [n for n in names if n not in self._index]
        if unknown:
            raise FedpgmError(f"unknown column(s) {unknown}; known columns are {self.names}")

    def kind_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for f in self.features:
            counts[f.kind] = counts.get(f.kind, 0) + 1
        return counts

    def select(self, names: Iterable[str]) -> "Schema":
        """The sub-schema of ``names`` in this schema's order; keeps the label if selected."""
        names = list(names)
        self.check_names(names)
        wanted = set(names)
        feats = tuple(f for f in self.features if f.name in wanted)
        return Schema(feats, self.label if self.label in wanted else None, self.pixel_levels)

    def with_label(self, label: str | None) -> "Schema":
        return Schema(self.features, label, self.pixel_levels)

    # -- tables -------------------------------------------------------------------------
    def validate_frame(self, frame: pd.DataFrame, what: str = "table") -> None:
        """Check that ``frame`` is an encoded table of exactly this schema's columns."""
        cols = list(frame.columns)
        unknown = [c for c in cols if c not in self._index]
        missing = [n for n in self.names if n not in set(cols)]
        if unknown or missing:
            raise FedpgmError(
                f"{what} columns do not match the schema (unknown {unknown}, missing {missing}); "
                "fix the header or the schema"
            )
        for f in self.features:
            values = frame[f.name].to_numpy(dtype=float)
            if np.isinf(values).any():
                raise FedpgmError(f"{what} column '{f.name}' holds an infinite value; replace it")
            if f.discrete:
                v = values[~np.isnan(values)]
                bad = v[(v != np.round(v)) | (v < 0) | (v >= f.cardinality)]
                if bad.size:
                    raise FedpgmError(
                        f"{what} column '{f.name}' holds code {float(bad[0])} outside 0..{f.cardinality - 1}"
                        f" ({f.kind} with categories {list(f.states)})"
                    )
        if self.pixel_levels is not None:
            pix = [f.name for f in self.features if not f.discrete and f.name != self.label]
            values = frame[pix].to_numpy(dtype=float)
            bad = ~np.isnan(values) & ((values != np.round(values)) | (values < 0) | (values >= self.pixel_levels))
            if bad.any():
                r, c = np.argwhere(bad)[0]
                raise FedpgmError(f"{what} pixel column '{pix[c]}' holds {values[r, c]}, outside the integers "
                                  f"0..{self.pixel_levels - 1}; images hold pixel values in that range")
        if self.label is not None and frame[self.label].isna().any():
            n = int(frame[self.label].isna().sum())
            raise FedpgmError(
                f"{what} label column '{self.label}' has {n} missing value(s); drop those rows "
                "or choose another label"
            )

    def encode(self, raw: pd.DataFrame, what: str = "table") -> pd.DataFrame:
        """Raw values (strings, numbers) to an encoded float table; unknown categories fail."""
        self.check_names(raw.columns)
        out = {}
        for f in self.features:
            if f.name not in raw.columns:
                raise FedpgmError(f"{what} lacks column '{f.name}' named in the schema; add it")
            col = raw[f.name]
            if not f.discrete:
                num = pd.to_numeric(col, errors="coerce")
                bad = col[num.isna() & col.notna()]
                if len(bad):
                    raise FedpgmError(
                        f"{what} column '{f.name}' is continuous but holds text {bad.iloc[0]!r}; "
                        "fix the value or declare the column categorical"
                    )
                out[f.name] = num.astype(float)
                continue
            lookup = {c: i for i, c in enumerate(f.states)}
            present = col.dropna().unique()
            keys = {v: canonical(v) for v in present}
            unknown = [v for v, k in keys.items() if k not in lookup]
            if unknown:
                raise FedpgmError(
                    f"{what} column '{f.name}' holds '{canonical(unknown[0])}', not one of its categories "
                    f"{list(f.states)}; add it to the schema"
                )
            codes = col.map({v: float(lookup[k]) for v, k in keys.items()}).astype(float)
            out[f.name] = codes
        frame = pd.DataFrame(out, index=raw.index)
        return frame[self.names]

    def decode(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Codes back to category names (continuous columns unchanged); the inverse of encode."""
        out = {}
        for name in frame.columns:
            f = self[name]
            if f.discrete:
                cats = np.asarray(f.categories, dtype=object)
                v = frame[name].to_numpy(dtype=float)
                col = np.full(len(v), None, dtype=object)
                col[~np.isnan(v)] = cats[v[~np.isnan(v)].astype(int)]
                out[name] = col
            else:
                out[name] = frame[name].to_numpy()
        return pd.DataFrame(out, index=frame.index, columns=list(frame.columns))

    # -- files --------------------------------------------------------------------------
    def to_dict(self) -> dict:
        out: dict = {"features": [f.to_dict() for f in self.features], "label": self.label}
        if self.pixel_levels is not None:
            out["pixel_levels"] = self.pixel_levels
        return out

    @staticmethod
    def from_dict(d: dict) -> "Schema":
        if not isinstance(d, dict) or not isinstance(d.get("features"), list):
            raise FedpgmError("a schema is a JSON object with a 'features' list; see docs/data.md")
        return Schema(tuple(Feature.from_dict(x) for x in d["features"]), d.get("label"), d.get("pixel_levels"))

    def save(self, path: str | Path) -> None:
        from fedpgm.files import write_text_atomic

        write_text_atomic(path, json.dumps(self.to_dict(), indent=2) + "\n")

    @staticmethod
    def load(path: str | Path) -> "Schema":
        path = Path(path)
        if not path.is_file():
            raise FedpgmError(f"schema file {path} does not exist; pass the path of a schema JSON")
        try:
            return Schema.from_dict(json.loads(path.read_text()))
        except json.JSONDecodeError as e:
            raise FedpgmError(f"schema file {path} is not valid JSON ({e.msg}, line {e.lineno})") from None


def infer_feature(name: str, column: pd.Series, max_categories: int = 20) -> tuple[Feature, str]:
    """Guess one column's feature type; returns the feature and a one-line reason."""
    values = column.dropna()
    if values.empty:
        raise FedpgmError(f"column '{name}' has no values; drop it")
    numeric = pd.to_numeric(values, errors="coerce")
    stray = values[numeric.isna()]
    if 0 < len(stray) <= 0.1 * len(values) and numeric.nunique() > max_categories:
        shown = sorted({str(v) for v in stray})[:5]
        raise FedpgmError(f"column '{name}' is numeric except for {len(stray)} cell(s) such as {shown}; "
                          "leave missing cells empty, fix those cells, or declare the column's type in a "
                          "--schema file")
    if numeric.notna().all():
        distinct = np.unique(numeric.to_numpy(dtype=float))
        if len(distinct) == 2:
            cats = tuple(canonical(v) for v in distinct)
            return Feature(name, "binary", cats), f"numeric with 2 values {list(cats)}"
        integral = bool(np.all(distinct == np.round(distinct)))
        if integral and len(distinct) <= max_categories and len(distinct) < len(values):
            cats = tuple(canonical(v) for v in distinct)
            return Feature(name, "ordinal", cats), f"integers with {len(distinct)} levels"
        return Feature(name, "continuous"), f"numeric with {len(distinct)} distinct values"
    names = sorted({canonical(v) for v in values})
    if len(names) == 2:
        return Feature(name, "binary", tuple(names)), f"text with 2 values {names}"
    reason = f"text with {len(names)} values"
    if len(names) > max_categories:
        reason += f" (more than {max_categories}: check this is not an id or free text)"
    return Feature(name, "categorical", tuple(names)), reason


def infer_schema(
    raw: pd.DataFrame, label: str | None = None, max_categories: int = 20
) -> tuple[Schema, dict[str, str]]:
    """Infer a schema from raw values; returns it and, per column, why that type was chosen."""
    if label is not None and label not in raw.columns:
        raise FedpgmError(f"label '{label}' is not a column; choose one of {list(raw.columns)}")
    feats, reasons = [], {}
    for name in raw.columns:
        feat, reason = infer_feature(str(name), raw[name], max_categories)
        feats.append(feat)
        reasons[str(name)] = reason
    return Schema(tuple(feats), label), reasons


ID_NAMES = ("rownames", "row.names", "id", "index", "")


def id_like_name(name: str) -> bool:
    """``rownames``, ``id``, ``customer_id``, ``Unnamed: 0`` (pandas' index), ``""``..."""
    n = name.strip().lower()
    return n in ID_NAMES or bool(re.fullmatch(r"unnamed: ?\d+", n)) or n.endswith(("_id", ".id", " id"))


def id_columns(raw: pd.DataFrame, label: str | None = None, keep: Iterable[str] = ()) -> list[str]:
    """The columns that look like row ids: unique per row, and named like an id or holding
    consecutive integers k, k+1, ... (at least 10 rows); never the label nor a ``keep`` column."""
    skip = set(keep) | {label}
    found = []
    for name in raw.columns:
        col = raw[name]
        if name in skip or col.isna().any() or not col.is_unique:
            continue
        counting = (len(col) >= 10 and pd.api.types.is_integer_dtype(col)
                    and bool((np.diff(col.to_numpy()) == 1).all()))
        if id_like_name(str(name)) or counting:
            found.append(str(name))
    return found
