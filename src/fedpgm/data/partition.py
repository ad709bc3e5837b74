"""Partitioners: split a dataset across clients the way federations are split.

- horizontal: same columns, disjoint rows: ``iid``, ``label-skew`` (each client sees only some
  classes, as in the FedPC paper) or ``dirichlet`` (class proportions ~ Dirichlet(alpha)).
- vertical: same rows (aligned by ``row_id``), disjoint column groups (random or explicit);
  the label goes to one named client or to all. With ``overlap`` below 1, only that fraction of
  the rows is held by every client and each other row by one client only, so the parties' id
  sets differ (as between real institutions; ``fedpgm.federation.psi`` aligns them).
- hybrid: clients hold disjoint row blocks plus an optional common block of rows seen by all;
  ``shared`` columns are held by every client (so they are held on different rows), every other
  column by exactly one client.

The test rows follow the same plan (horizontal: spread iid; vertical: all rows; hybrid: the
same block construction), so each client can evaluate on its own part. Every partition is
reproducible by its seed, and each ``ClientData`` holds only that client's rows and columns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from fedpgm.data.dataset import Dataset
from fedpgm.data.images import region_groups
from fedpgm.data.loaders import read_csv_file
from fedpgm.data.policy import ClientPolicy
from fedpgm.data.schema import ROW_ID, Schema, infer_schema
from fedpgm.errors import FedpgmError
from fedpgm.files import atomic_folder, check_output_folder, replacing

MANIFEST = "manifest.json"
FORMAT = "fedpgm-partition/1"
SPLITS = ("horizontal", "vertical", "hybrid")
HORIZONTAL_SCHEMES = ("iid", "label-skew", "dirichlet")


def client_ids(k: int) -> list[str]:
    return [f"client-{i}" for i in range(k)]


@dataclass
class ClientData:
    """One client's private part: its columns (``schema``) of its rows (index ``row_id``),
    ``meta``: JSON the client knows about its data beyond the table (e.g. its concept graph), and
    ``policy``: its own privacy floors, which no server request lowers (``fedpgm.data.policy``)."""

    client_id: str
    schema: Schema
    train: pd.DataFrame
    test: pd.DataFrame | None = None
    meta: dict = field(default_factory=dict)
    policy: ClientPolicy = field(default_factory=ClientPolicy)

    @property
    def columns(self) -> list[str]:
        return self.schema.names

    @property
    def has_label(self) -> bool:
        return self.schema.label is not None

    def __repr__(self) -> str:
        n_test = 0 if self.test is None else len(self.test)
        return (f"ClientData({self.client_id!r}, {len(self.train)} train rows, {n_test} test rows, "
                f"{len(self.columns)} columns)")


@dataclass
class Partition:
    """A dataset split across clients; ``schema`` is the whole table's schema."""

    split: str
    schema: Schema
    clients: list[ClientData]
    dataset: str = ""
    params: dict = field(default_factory=dict)

    def __getitem__(self, client_id: str) -> ClientData:
        for c in self.clients:
            if c.client_id == client_id:
                return c
        raise FedpgmError(f"no client '{client_id}'; clients are {[c.client_id for c in self.clients]}")

    def drop_label(self) -> "Partition":
        """The same partition with the label column removed from every client."""
        if self.schema.label is None:
            return self
        clients = []
        for c in self.clients:
            keep = c.schema.select([n for n in c.schema.names if n != self.schema.label])
            clients.append(replace(c, schema=keep, train=c.train[keep.names],
                                   test=None if c.test is None else c.test[keep.names]))
        return replace(self, schema=self.schema.select(self.schema.feature_names), clients=clients)

    def summary(self) -> list[dict]:
        """One row per client: rows, columns, label classes seen."""
        rows = []
        for c in self.clients:
            row = {"client": c.client_id, "train_rows": len(c.train),
                   "test_rows": 0 if c.test is None else len(c.test), "columns": len(c.columns),
                   "label": c.has_label}
            label = self.schema.label
            if c.has_label and label is not None and self.schema[label].discrete:
                row["classes"] = sorted(int(v) for v in c.train[label].dropna().unique())
            rows.append(row)
        return rows

    def manifest(self, files: dict[str, dict[str, str]] | None = None) -> dict:
        """The JSON manifest: who holds which rows and columns, and the schema."""
        entries = []
        for c in self.clients:
            entry = {"id": c.client_id, "columns": c.columns, "label": c.has_label,
                     "n_train": len(c.train), "train_rows": row_list(c.train)}
            if c.test is not None:
                entry.update(n_test=len(c.test), test_rows=row_list(c.test))
            if c.meta:
                entry["meta"] = c.meta
            entry.update((files or {}).get(c.client_id, {}))
            entries.append(entry)
        return {"format": FORMAT, "dataset": self.dataset, "split": self.split,
                "params": self.params, "schema": self.schema.to_dict(), "clients": entries}

    def write(self, out: str | Path, overwrite: bool = False) -> Path:
        """Write ``client-i.csv`` (+ ``client-i.test.csv``) and ``manifest.json`` atomically.

        The files are written into a temporary folder beside ``out`` and moved into place at
        the end, so a failure leaves nothing half-written.
        """
        out = Path(out)
        check_output_folder(out, overwrite)
        with replacing(out if overwrite else None), atomic_folder(out) as tmp:
            files = {}
            for c in self.clients:
                files[c.client_id] = {"train_file": f"{c.client_id}.csv"}
                write_client_csv(c.train, c.schema, tmp / f"{c.client_id}.csv")
                if c.test is not None:
                    files[c.client_id]["test_file"] = f"{c.client_id}.test.csv"
                    write_client_csv(c.test, c.schema, tmp / f"{c.client_id}.test.csv")
            (tmp / MANIFEST).write_text(json.dumps(self.manifest(files), indent=1) + "\n")
        return out


def row_list(frame: pd.DataFrame) -> list:
    return [v.item() if hasattr(v, "item") else v for v in frame.index]


def write_client_csv(frame: pd.DataFrame, schema: Schema, path: Path) -> None:
    """A client's table with category names (not codes), ``row_id`` first."""
    schema.decode(frame).to_csv(path, index_label=ROW_ID)


def load_client_csv(path: str | Path, client_id: str, schema: Schema) -> pd.DataFrame:
    """Read one client's CSV and encode it with ``schema`` (its columns must be in it). Without a
    ``row_id`` column the rows are numbered by position and the index has no name: such a party
    holds no ids to align rows by (``fedpgm.federation.psi`` refuses it)."""
    raw = read_csv_file(Path(path))
    if isinstance(raw.index, pd.RangeIndex):
        raw.index.name = None
    unknown = [c for c in raw.columns if c not in schema]
    if unknown:
        raise FedpgmError(f"client '{client_id}' file {path} has column(s) {unknown} not in the "
                          "schema; rename them or extend the schema")
    sub = schema.select(raw.columns)
    frame = sub.encode(raw, f"client '{client_id}' file {path}")
    sub.validate_frame(frame, f"client '{client_id}' file {path}")
    return frame


# -- partitioners ---------------------------------------------------------------------------------
def check_clients(k: int, n: int, what: str) -> None:
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise FedpgmError(f"the number of clients must be at least 1, got {k}")
    if n < k:
        raise FedpgmError(f"{n} {what} cannot be split across {k} clients; use at most {n} clients")


def split_evenly(index: np.ndarray, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    return np.array_split(rng.permutation(index), k)


def horizontal(dataset: Dataset, clients: int, seed: int = 0, scheme: str = "iid",
               alpha: float = 0.5, classes_per_client: int = 1, min_rows: int = 1) -> Partition:
    """Disjoint rows, all columns. See the module docstring for the schemes."""
    schema, train = dataset.schema, dataset.train
    check_clients(clients, len(train), "training rows")
    rng = np.random.default_rng(seed)
    ids = train.index.to_numpy()
    if scheme == "iid":
        blocks = split_evenly(ids, clients, rng)
        params: dict = {"scheme": scheme}
    elif scheme in ("label-skew", "dirichlet"):
        if schema.label is None or not schema[schema.label].discrete:
            raise FedpgmError(f"scheme '{scheme}' needs a discrete label; pass --label or use iid")
        y = train[schema.label].to_numpy().astype(int)
        if scheme == "label-skew":
            blocks = label_skew_blocks(ids, y, clients, classes_per_client, rng)
            params = {"scheme": scheme, "classes_per_client": classes_per_client}
        else:
            blocks = dirichlet_blocks(ids, y, clients, alpha, min_rows, rng)
            params = {"scheme": scheme, "alpha": alpha}
    else:
        raise FedpgmError(f"unknown horizontal scheme '{scheme}'; use one of {HORIZONTAL_SCHEMES}")
    test_blocks = split_evenly(dataset.test.index.to_numpy(), clients, rng)
    parts = [ClientData(cid, schema, train.loc[np.sort(b)], dataset.test.loc[np.sort(t)])
             for cid, b, t in zip(client_ids(clients), blocks, test_blocks)]
    return Partition("horizontal", schema, parts, dataset.name, {"seed": seed, **params})


def label_skew_blocks(ids, y, k, per_client, rng) -> list[np.ndarray]:
    """Client i gets ``per_client`` classes (round-robin over shuffled classes, all covered);
    the rows of each class are split evenly among the clients that hold it."""
    classes = np.unique(y)
    if not 1 <= per_client <= len(classes):
        raise FedpgmError(f"classes per client must be between 1 and {len(classes)}, got {per_client}")
    if k * per_client < len(classes):
        raise FedpgmError(f"{k} clients with {per_client} class(es) each cannot cover {len(classes)} "
                          "classes; raise --classes-per-client or --clients")
    order = rng.permutation(classes)
    holders: dict[int, list[int]] = {int(c): [] for c in classes}
    for i in range(k):
        for j in range(per_client):
            holders[int(order[(i * per_client + j) % len(classes)])].append(i)
    blocks: list[list[np.ndarray]] = [[] for _ in range(k)]
    for c, hs in holders.items():
        rows = ids[y == c]
        if len(rows) < len(hs):
            raise FedpgmError(f"class {c} has {len(rows)} rows for {len(hs)} clients; use fewer clients")
        for h, part in zip(hs, split_evenly(rows, len(hs), rng)):
            blocks[h].append(part)
    return [np.concatenate(b) for b in blocks]


def dirichlet_blocks(ids, y, k, alpha, min_rows, rng, tries: int = 1000) -> list[np.ndarray]:
    """Per class, client shares ~ Dirichlet(alpha * 1_k); redrawn until every client has
    ``min_rows`` rows (the usual recipe of Hsu et al. 2019)."""
    if not alpha > 0:
        raise FedpgmError(f"alpha must be > 0, got {alpha}; smaller alpha means stronger label skew")
    classes = np.unique(y)
    for _ in range(tries):
        blocks: list[list[np.ndarray]] = [[] for _ in range(k)]
        for c in classes:
            rows = rng.permutation(ids[y == c])
            cuts = (np.cumsum(rng.dirichlet(np.full(k, alpha)))[:-1] * len(rows)).astype(int)
            for i, part in enumerate(np.split(rows, cuts)):
                blocks[i].append(part)
        out = [np.concatenate(b) for b in blocks]
        if min(len(b) for b in out) >= min_rows:
            return out
    raise FedpgmError(f"Dirichlet(alpha={alpha}) left a client with fewer than {min_rows} rows in "
                      f"{tries} draws; raise alpha or use fewer clients")


def parse_groups(groups: Sequence[Sequence[str]] | str) -> list[list[str]]:
    """Column groups from lists or from a string ``"a,b;c,d"`` (one group per client)."""
    if isinstance(groups, str):
        groups = [g.split(",") for g in groups.split(";")]
    return [[c.strip() for c in g if c.strip()] for g in groups]


def vertical(dataset: Dataset, clients: int, seed: int = 0,
             groups: Sequence[Sequence[str]] | str | None = None,
             label_to: str = "client-0", overlap: float = 1.0) -> Partition:
    """Disjoint column groups (random, or ``groups``); the label to ``label_to`` (a client id) or
    to ``"all"``; rows: all of them at every client, or with ``overlap`` < 1 a common block of
    that fraction plus a block of its own per client (train and test alike)."""
    schema = dataset.schema
    if not 0.0 < overlap <= 1.0:
        raise FedpgmError(f"overlap must lie in (0, 1] for a vertical split, got {overlap}; 1 means "
                          "every client holds every row")
    feats = schema.feature_names
    rng = np.random.default_rng(seed)
    if groups is None:
        check_clients(clients, len(feats), "feature columns")
        cols = [list(g) for g in np.array_split(rng.permutation(np.array(feats, dtype=object)), clients)]
    else:
        cols = parse_groups(groups)
        if len(cols) != clients:
            raise FedpgmError(f"{len(cols)} column groups given for {clients} clients; give one per client")
        check_column_groups(cols, feats, schema)
    label_holders = check_label_to(label_to, clients, schema)
    if overlap < 1.0:
        train_blocks = hybrid_blocks(dataset.train.index.to_numpy(), clients, overlap, rng)
        test_blocks = hybrid_blocks(dataset.test.index.to_numpy(), clients, overlap, rng)
    else:
        train_blocks = [dataset.train.index] * clients
        test_blocks = [dataset.test.index] * clients
    parts = []
    for i, (cid, group) in enumerate(zip(client_ids(clients), cols)):
        names = list(group) + ([schema.label] if i in label_holders else [])
        sub = schema.select(names)
        parts.append(ClientData(cid, sub, dataset.train.loc[train_blocks[i], sub.names],
                                dataset.test.loc[test_blocks[i], sub.names]))
    params = {"seed": seed, "columns": "explicit" if groups is not None else "random",
              "label_to": label_to if schema.label else None, "overlap": overlap}
    return Partition("vertical", schema, parts, dataset.name, params)


def check_column_groups(cols: list[list[str]], feats: list[str], schema: Schema) -> None:
    flat = [c for g in cols for c in g]
    schema.check_names(flat)
    if schema.label in flat:
        raise FedpgmError(f"the label '{schema.label}' is placed by --label-to, not in a column group")
    dupes = sorted({c for c in flat if flat.count(c) > 1})
    if dupes:
        raise FedpgmError(f"column(s) {dupes} appear in more than one group; groups must be disjoint")
    left = [c for c in feats if c not in set(flat)]
    if left:
        raise FedpgmError(f"column(s) {left} are in no group; every column needs a client")
    if any(not g for g in cols):
        raise FedpgmError("a column group is empty; every client needs at least one column")


def check_label_to(label_to: str, clients: int, schema: Schema) -> set[int]:
    """Indices of the clients that receive the label."""
    if schema.label is None:
        return set()
    if label_to == "all":
        return set(range(clients))
    ids = client_ids(clients)
    if label_to not in ids:
        raise FedpgmError(f"--label-to '{label_to}' is not a client; use 'all' or one of {ids}")
    return {ids.index(label_to)}


def hybrid_blocks(index: np.ndarray, k: int, overlap: float, rng) -> list[np.ndarray]:
    """A common block of ``overlap`` of the rows for every client plus k disjoint blocks."""
    perm = rng.permutation(index)
    n_common = int(round(overlap * len(perm)))
    common, rest = perm[:n_common], perm[n_common:]
    if len(rest) < k:
        raise FedpgmError(f"{len(rest)} rows outside the common block cannot give {k} clients rows "
                          "of their own; lower --overlap or use fewer clients")
    return [np.sort(np.concatenate([common, b])) for b in np.array_split(rest, k)]


def hybrid(dataset: Dataset, clients: int, seed: int = 0, shared: int | None = None,
           overlap: float = 0.2, label_to: str = "all", groups: Sequence[Sequence[str]] | None = None) -> Partition:
    """Rows in blocks (plus a common block), ``shared`` columns on every client, every other
    column on exactly one client; or ``groups``: each client's columns, overlapping (as image
    patches that share a band), every feature in at least one."""
    schema = dataset.schema
    if clients < 2:
        raise FedpgmError("a hybrid federation needs at least 2 clients")
    if not 0.0 <= overlap < 1.0:
        raise FedpgmError(f"overlap must lie in [0, 1), got {overlap}")
    feats = schema.feature_names
    rng = np.random.default_rng(seed)
    if groups is not None:
        cols = parse_groups(groups)
        flat = {c for g in cols for c in g}
        if len(cols) != clients or not all(cols) or flat != set(feats):
            raise FedpgmError(f"hybrid column groups must be {clients} non-empty groups covering every feature")
        if shared is not None:
            raise FedpgmError("--shared picks random shared columns; column groups already fix them")
        shared_cols = [c for c in feats if sum(c in g for g in cols) > 1]
        private = [[c for c in g if c not in shared_cols] for g in cols]
    else:
        shared = default_shared(len(feats)) if shared is None else shared
        if shared < 1:
            raise FedpgmError("a hybrid federation needs at least 1 shared column (--shared)")
        if len(feats) - shared < clients:
            raise FedpgmError(f"{len(feats)} feature columns with {shared} shared leave fewer than one "
                              f"private column for each of {clients} clients; lower --shared or --clients")
        perm = [str(c) for c in rng.permutation(np.array(feats, dtype=object))]
        shared_cols = perm[:shared]
        private = [list(block) for block in np.array_split(np.array(perm[shared:], dtype=object), clients)]
    label_holders = check_label_to(label_to, clients, schema)
    train_blocks = hybrid_blocks(dataset.train.index.to_numpy(), clients, overlap, rng)
    test_blocks = hybrid_blocks(dataset.test.index.to_numpy(), clients, overlap, rng)
    parts = []
    for i, cid in enumerate(client_ids(clients)):
        own = list(cols[i]) if groups is not None else list(shared_cols) + list(private[i])
        names = own + ([schema.label] if i in label_holders and schema.label is not None else [])
        sub = schema.select(names)
        parts.append(ClientData(cid, sub, dataset.train.loc[train_blocks[i], sub.names],
                                dataset.test.loc[test_blocks[i], sub.names]))
    params = {"seed": seed, "shared_columns": [str(c) for c in shared_cols], "overlap": overlap,
              "label_to": label_to if schema.label else None}
    return Partition("hybrid", schema, parts, dataset.name, params)


def most_clients(schema: Schema, split: str, **options) -> int | None:
    """The most clients a random column split of ``schema`` can give each a column of its own
    (vertical: one per feature; hybrid: one per column left after the shared ones); None where
    the columns set no limit (horizontal, or column groups given)."""
    feats = len(schema.feature_names)
    if split == "vertical" and options.get("groups") is None and "regions" not in options:
        return feats
    if split == "hybrid" and options.get("groups") is None and "regions" not in options:
        shared = options.get("shared")
        return feats - (default_shared(feats) if shared is None else shared)
    return None


def default_shared(features: int) -> int:
    """A hybrid split's shared columns by default: a fifth of the features, at least one."""
    return max(1, round(0.2 * features))


def partition(dataset: Dataset, split: str, clients: int, seed: int = 0, **options) -> Partition:
    """Dispatch to ``horizontal``, ``vertical`` or ``hybrid`` with their keyword options."""
    funcs: dict[str, Callable[..., Partition]] = {"horizontal": horizontal, "vertical": vertical, "hybrid": hybrid}
    allowed = {"horizontal": {"scheme", "alpha", "classes_per_client", "min_rows"},
               "vertical": {"groups", "label_to", "overlap"},
               "hybrid": {"shared", "overlap", "label_to", "groups"}}
    if split not in funcs:
        raise FedpgmError(f"unknown split '{split}'; use one of {SPLITS}")
    if "regions" in options:  # images: column groups by image region (fedpgm.data.images)
        if split == "horizontal":
            raise FedpgmError("image regions split columns; use them with a vertical or hybrid split")
        options = dict(options)
        band = options.pop("band", None)
        groups = region_groups(dataset.schema, options.pop("regions"), band or (2 if split == "hybrid" else 0))
        if len(groups) != clients:
            raise FedpgmError(f"the image split gives {len(groups)} regions for {clients} clients; "
                              f"use --clients {len(groups)}")
        options["groups"] = groups
    extra = sorted(set(options) - allowed[split])
    if extra:
        raise FedpgmError(f"option(s) {extra} do not apply to a {split} split "
                          f"(it takes {sorted(allowed[split])})")
    return funcs[split](dataset, clients, seed, **options)


# -- from files -----------------------------------------------------------------------------------
def read_partition(folder: str | Path) -> Partition:
    """Load a folder written by ``Partition.write`` (or by hand) through its manifest."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise FedpgmError(f"{folder} has no {MANIFEST}; pass a folder written by `fedpgm partition` "
                          "or use load_client_files")
    try:
        man = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise FedpgmError(f"{path} is not valid JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        raise FedpgmError(f"{path} is not a fedpgm partition manifest (format {FORMAT})")
    schema = Schema.from_dict(man["schema"])
    parts = []
    for entry in man["clients"]:
        cid = entry["id"]
        train = load_client_csv(folder / entry["train_file"], cid, schema)
        test = load_client_csv(folder / entry["test_file"], cid, schema) if "test_file" in entry else None
        parts.append(ClientData(cid, schema.select(train.columns), train, test, entry.get("meta", {})))
    return Partition(man["split"], schema, parts, man.get("dataset", ""), man.get("params", {}))


def load_client_files(paths: Sequence[str | Path], schema: Schema | None = None,
                      label: str | None = None) -> Partition:
    """One CSV per client (client id = file stem), e.g. from a real deployment.

    Without a ``schema``, it is inferred from all files together (so every client encodes
    categories the same way); the split kind is detected from the rows and columns.
    """
    files = [Path(p) for p in paths]
    if not files:
        raise FedpgmError("no client files given; pass one CSV per client")
    stems = [p.stem for p in files]
    if len(set(stems)) != len(stems):
        raise FedpgmError(f"client files share a name {stems}; client ids come from file names")
    raws = {s: read_csv_file(p) for s, p in zip(stems, files)}
    if schema is None:
        pooled = pd.concat(list(raws.values()), axis=0, ignore_index=True)
        schema, _ = infer_schema(pooled, label)
    elif label is not None:
        schema = schema.with_label(label)
    parts = []
    for s, p in zip(stems, paths):
        train = load_client_csv(p, s, schema)
        parts.append(ClientData(s, schema.select(train.columns), train))
    return Partition(detect_split(parts), schema, parts, params={"files": [str(p) for p in paths]})


def detect_split(parts: list[ClientData]) -> str:
    """``horizontal`` (same columns), ``vertical`` (each feature column at one client only, or the
    same rows everywhere; row ids may differ, see ``fedpgm.federation.psi``) or ``hybrid``."""
    cols = [set(c.columns) for c in parts]
    if all(c == cols[0] for c in cols):
        return "horizontal"
    label = next((c.schema.label for c in parts if c.schema.label is not None), None)
    features = [c - {label} for c in cols]
    if sum(len(c) for c in features) == len(set().union(*features)):
        return "vertical"
    rows = [set(c.train.index) for c in parts]
    return "vertical" if all(r == rows[0] for r in rows) else "hybrid"
