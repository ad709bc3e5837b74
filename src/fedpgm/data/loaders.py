"""Loaders for real tables: scikit-learn's bundled sets, UCI Adult, Give Me Some Credit,
the binary density-estimation benchmark (DEBD) and any CSV file.

Split and missing-value policy of each loader (see ``docs/data.md``):

========================  =========================================  ========================
loader                    train/test                                 missing values
========================  =========================================  ========================
breast_cancer/digits/wine random by seed (stratified), test 20%      none
adult                     official adult.data / adult.test           "?" -> NaN, keep
credit                    random by seed (stratified), test 20%      NaN and 96/98 -> NaN, keep
debd:NAME                 official train / valid / test files        none
csv:PATH                  random by seed (stratified), test 20%      keep (rows without a label left out)
========================  =========================================  ========================

``--missing impute`` replaces ``keep`` by train medians/modes (``fedpgm.data.dataset.impute``).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from fedpgm.data.dataset import Dataset, apply_missing_policy, random_split, table
from fedpgm.data.registry import LoadOptions, register, require_file, resolve_data_dir
from fedpgm.data.schema import ROW_ID, Feature, Kind, Schema, canonical, id_columns, infer_schema
from fedpgm.errors import FedpgmError

SPLIT_OPTIONS = ("test_size", "missing")


def finish(name: str, frame: pd.DataFrame, schema: Schema, options: LoadOptions,
           default_missing: str = "keep", **info: str) -> Dataset:
    """Split ``frame`` by seed, apply the missing-value policy, and build the ``Dataset``."""
    schema.validate_frame(frame, name)
    test_size = options.test_size if options.test_size is not None else 0.2
    train, test = random_split(frame, schema, options.seed, test_size)
    missing = options.missing or default_missing
    parts = apply_missing_policy({"train": train, "test": test}, schema, missing)
    info = {"split": f"random, seed {options.seed}, test_size {test_size}",
            "missing": missing, **info}
    return Dataset(name, schema, parts["train"], parts["test"], info=info)


# -- scikit-learn's bundled tables ---------------------------------------------------------------
def sklearn_table(name: str, feature_kind: str, options: LoadOptions) -> Dataset:
    """scikit-learn's bundled table ``load_<name>`` (scikit-learn imported here: a process that
    only reads a client's CSV, as a Flower node does per message, does not pay for it)."""
    from sklearn import datasets

    bunch = getattr(datasets, f"load_{name}")()
    names = [str(n).replace(" ", "_") for n in bunch.feature_names]
    label = "target"
    classes = [canonical(c) for c in getattr(bunch, "target_names", np.unique(bunch.target))]
    if feature_kind == "ordinal":  # digits: pixel intensities 0..16
        levels = tuple(str(v) for v in range(17))
        feats = [Feature(n, "ordinal", levels) for n in names]
    else:
        feats = [Feature(n, "continuous") for n in names]
    label_kind: Kind = "binary" if len(classes) == 2 else "categorical"
    schema = Schema(tuple(feats) + (Feature(label, label_kind, tuple(classes)),), label)
    frame = table(np.column_stack([bunch.data, bunch.target]), schema.names)
    return finish(name, frame, schema, options, source="scikit-learn bundled copy")


@register("breast_cancer", "Wisconsin diagnostic breast cancer (scikit-learn), 30 continuous, "
          "label malignant/benign", options=SPLIT_OPTIONS)
def load_breast_cancer(_: str | None, options: LoadOptions) -> Dataset:
    return sklearn_table("breast_cancer", "continuous", options)


@register("digits", "8x8 handwritten digits (scikit-learn), 64 ordinal pixels 0..16, label 0-9",
          options=SPLIT_OPTIONS)
def load_digits(_: str | None, options: LoadOptions) -> Dataset:
    return sklearn_table("digits", "ordinal", options)


@register("wine", "Wine recognition (scikit-learn), 13 continuous, 3 cultivars",
          options=SPLIT_OPTIONS)
def load_wine(_: str | None, options: LoadOptions) -> Dataset:
    return sklearn_table("wine", "continuous", options)


# -- UCI Adult -----------------------------------------------------------------------------------
ADULT_COLUMNS: list[tuple[str, Kind]] = [
    ("age", "continuous"), ("workclass", "categorical"), ("fnlwgt", "continuous"),
    ("education", "categorical"), ("education-num", "ordinal"), ("marital-status", "categorical"),
    ("occupation", "categorical"), ("relationship", "categorical"), ("race", "categorical"),
    ("sex", "binary"), ("capital-gain", "continuous"), ("capital-loss", "continuous"),
    ("hours-per-week", "continuous"), ("native-country", "categorical"), ("income", "binary"),
]


def read_adult_file(path: Path, skiprows: int) -> pd.DataFrame:
    raw = pd.read_csv(path, header=None, names=[c for c, _ in ADULT_COLUMNS], skiprows=skiprows,
                      skipinitialspace=True, na_values=["?"], dtype=str, skip_blank_lines=True)
    raw["income"] = raw["income"].str.rstrip(".")  # adult.test writes "<=50K." and ">50K."
    return raw


@register("adult", "UCI Adult census income: 14 mixed features, label income >50K",
          options=("missing",), files=("adult/adult.data", "adult/adult.test"))
def load_adult(_: str | None, options: LoadOptions) -> Dataset:
    root = resolve_data_dir(options) / "adult"
    train_raw = read_adult_file(require_file(root / "adult.data", "adult"), 0)
    test_raw = read_adult_file(require_file(root / "adult.test", "adult"), 1)  # line 1: comment
    both = pd.concat([train_raw, test_raw], ignore_index=True)
    feats = []
    for name, kind in ADULT_COLUMNS:
        if kind == "continuous":
            feats.append(Feature(name, kind))
            continue
        values = both[name].dropna().unique()
        if kind == "ordinal":
            cats = tuple(canonical(v) for v in sorted(int(v) for v in values))
        else:
            cats = tuple(sorted(str(v) for v in values))
        feats.append(Feature(name, kind, cats))
    schema = Schema(tuple(feats), "income")
    both = both[both["income"].notna()]
    frame = schema.encode(both, "adult")
    frame.index.name = ROW_ID
    n_train = int(both.index.to_numpy().searchsorted(len(train_raw)))
    missing = options.missing or "keep"
    parts = apply_missing_policy({"train": frame.iloc[:n_train], "test": frame.iloc[n_train:]},
                                 schema, missing)
    return Dataset("adult", schema, parts["train"], parts["test"],
                   info={"split": "official adult.data / adult.test", "missing": missing,
                         "source": str(root)})


# -- Give Me Some Credit -------------------------------------------------------------------------
CREDIT_LABEL = "SeriousDlqin2yrs"
CREDIT_PAST_DUE = ["NumberOfTime30-59DaysPastDueNotWorse", "NumberOfTimes90DaysLate",
                   "NumberOfTime60-89DaysPastDueNotWorse"]


@register("credit", "Give Me Some Credit (Kaggle): 10 numeric features, label SeriousDlqin2yrs",
          options=SPLIT_OPTIONS, files=("give_me_some_credit/cs-training.csv",))
def load_credit(_: str | None, options: LoadOptions) -> Dataset:
    path = require_file(resolve_data_dir(options) / "give_me_some_credit" / "cs-training.csv",
                        "credit")
    raw = pd.read_csv(path, index_col=0)  # the first, unnamed column is a row id
    raw.index.name = ROW_ID
    # 96 and 98 in the past-due counts are special codes (not counts): treat them as missing.
    for col in CREDIT_PAST_DUE:
        raw.loc[raw[col].isin([96, 98]), col] = np.nan
    feats = [Feature(CREDIT_LABEL, "binary", ("0", "1"))]
    feats += [Feature(c, "continuous") for c in raw.columns if c != CREDIT_LABEL]
    schema = Schema(tuple(feats), CREDIT_LABEL)
    frame = raw[schema.names].astype(float)
    return finish("credit", frame, schema, options, source=str(path),
                  codes="96/98 in past-due counts set to NaN")


# -- binary density-estimation benchmark ---------------------------------------------------------
def debd_paths(arg: str, options: LoadOptions) -> dict[str, Path]:
    """``NAME`` under DATA/debd/NAME/, or ``PATH/NAME`` (files in PATH or PATH/NAME/)."""
    if "/" in arg:
        folder, name = Path(arg).parent, Path(arg).name
        if (folder / name / f"{name}.train.data").is_file():
            folder = folder / name
    else:
        name = arg
        folder = resolve_data_dir(options) / "debd" / name
    return {part: require_file(folder / f"{name}.{part}.data", f"debd:{arg}")
            for part in ("train", "valid", "test")}


def read_binary_matrix(path: Path) -> np.ndarray:
    try:
        values = pd.read_csv(path, header=None, dtype=float).to_numpy()
    except (ValueError, pd.errors.ParserError) as e:
        raise FedpgmError(f"cannot read {path} as comma-separated 0/1 values ({e})") from None
    if not np.isin(values, (0.0, 1.0)).all():
        raise FedpgmError(f"{path} holds values other than 0 and 1; DEBD files are binary")
    return values


def debd_members(options: LoadOptions) -> list[str]:
    try:
        root = resolve_data_dir(options) / "debd"
    except FedpgmError:
        return []
    return sorted(p.name for p in root.glob("*") if (p / f"{p.name}.train.data").is_file())


@register("debd", "binary density-estimation benchmark: debd:NAME or debd:PATH/NAME "
          "(NAME.train/.valid/.test.data)", family=True, members=debd_members)
def load_debd(arg: str, options: LoadOptions) -> Dataset:
    paths = debd_paths(arg, options)
    mats = {part: read_binary_matrix(p) for part, p in paths.items()}
    widths = {m.shape[1] for m in mats.values()}
    if len(widths) != 1:
        raise FedpgmError(f"debd:{arg} files have different column counts {sorted(widths)}")
    d = widths.pop()
    schema = Schema(tuple(Feature(f"x{i}", "binary", ("0", "1")) for i in range(d)))
    parts, start = {}, 0
    for part in ("train", "valid", "test"):
        n = len(mats[part])
        parts[part] = table(mats[part], schema.names, np.arange(start, start + n))
        start += n
    return Dataset(f"debd:{Path(arg).name}", schema, parts["train"], parts["test"], parts["valid"],
                   info={"split": "official train / valid / test files", "missing": "none",
                         "source": str(paths["train"].parent)})


# -- any CSV file --------------------------------------------------------------------------------
def read_csv_file(path: Path) -> pd.DataFrame:
    """Read a user's CSV (a ``row_id`` column becomes the index); errors are one line."""
    if not path.is_file():
        raise FedpgmError(f"CSV file {path} does not exist; check the path")
    try:
        raw = pd.read_csv(path, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise FedpgmError(f"cannot read {path} as CSV ({str(e).splitlines()[0]}); fix the file") from None
    if raw.empty:
        raise FedpgmError(f"CSV file {path} has no data rows")
    with path.open(newline="") as fh:
        header = [c.strip() for c in next(csv.reader(fh), [])]
    dupes = sorted({c for c in header if header.count(c) > 1})
    if dupes:
        raise FedpgmError(f"CSV file {path} repeats column name(s) {dupes}; make names unique")
    raw.columns = header
    if ROW_ID in raw.columns:
        if raw[ROW_ID].duplicated().any():
            raise FedpgmError(f"CSV file {path} repeats a {ROW_ID}; row ids must be unique")
        raw = raw.set_index(ROW_ID)
    else:
        raw.index.name = ROW_ID
    return raw


def drop_id_columns(raw: pd.DataFrame, path: Path, options: LoadOptions,
                    schema: Schema | None = None) -> pd.DataFrame:
    """Leave out the columns that look like row ids (``id_columns``), with a note on stderr each;
    without a ``row_id`` column, the first integer one becomes the row index."""
    unknown = [k for k in options.keep if k not in raw.columns]
    if unknown:
        raise FedpgmError(f"--keep {', '.join(unknown)}: no such column in {path}; its columns are "
                          f"{list(raw.columns)}")
    keep = set(options.keep) | (set(schema.names) if schema is not None else set())
    ids = id_columns(raw, options.label, keep)
    indexed = not isinstance(raw.index, pd.RangeIndex)  # the file has a row_id column
    for name in ids:
        use = not indexed and pd.api.types.is_integer_dtype(raw[name])
        if use:
            raw = raw.set_index(name).rename_axis(ROW_ID)
            indexed = True
        else:
            raw = raw.drop(columns=name)
        how = f"used as the {ROW_ID} and left out" if use else "left out"
        hint = f" (use --keep {name} to model it)" if name.strip() else ""
        what = f"column '{name}'" if name.strip() else "the unnamed column"
        print(f"note: {what} looks like a row id (unique per row); {how}{hint}", file=sys.stderr)
    return raw


@register("csv", "any CSV file: csv:PATH, with --label and optionally --schema FILE "
          "(otherwise the schema is inferred; row-id columns are left out unless --keep NAME)",
          family=True, options=("test_size", "missing", "label", "schema", "keep"))
def load_csv(arg: str, options: LoadOptions) -> Dataset:
    path = Path(arg)
    raw = read_csv_file(path)
    if options.schema is not None:
        schema = Schema.load(options.schema)
        if options.label is not None:
            schema = schema.with_label(options.label)
        raw = drop_id_columns(raw, path, options, schema)
        how = f"schema from {options.schema}"
    else:
        raw = drop_id_columns(raw, path, options)
        schema, reasons = infer_schema(raw, options.label)
        how = "inferred: " + "; ".join(f"{k}: {schema[k].kind} ({v})" for k, v in reasons.items())
    frame = schema.encode(drop_unlabelled(raw, schema.label, path), str(path))
    return finish(f"csv:{path.name}", frame, schema, options, source=str(path), schema_source=how)


def drop_unlabelled(raw: pd.DataFrame, label: str | None, path: Path) -> pd.DataFrame:
    """The rows of ``raw`` whose ``label`` is known, with a note on stderr for those left out
    (labels are never imputed; as scikit-learn refuses a missing target, no row keeps one)."""
    if label is None or label not in raw.columns or not raw[label].isna().any():
        return raw
    known = raw[label].notna()
    if not known.any():
        raise FedpgmError(f"csv:{path.name}: label column '{label}' has no value at all; choose another --label")
    print(f"note: csv:{path.name}: {int((~known).sum())} of {len(raw)} rows have no '{label}' and are left out "
          "(labels are never imputed)", file=sys.stderr)
    return raw[known]
