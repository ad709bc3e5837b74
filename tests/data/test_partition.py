import json

import numpy as np
import pandas as pd
import pytest

from fedpgm.data import load_client_files, load_dataset, partition, read_partition
from fedpgm.data.partition import detect_split
from fedpgm.errors import FedpgmError


@pytest.fixture(scope="module")
def cancer():
    return load_dataset("breast_cancer", seed=0)


@pytest.fixture(scope="module")
def mixed():
    return load_dataset("synthetic:mixed", rows=1000, seed=0)


def all_rows(part, which="train"):
    return [set(getattr(c, which).index) for c in part.clients]


@pytest.mark.parametrize("scheme, opts", [("iid", {}), ("label-skew", {}),
                                          ("label-skew", {"classes_per_client": 2}),
                                          ("dirichlet", {"alpha": 0.3})])
def test_horizontal_disjoint_covering_reproducible(mixed, scheme, opts):
    part = partition(mixed, "horizontal", 5, seed=7, scheme=scheme, **opts)
    rows = all_rows(part)
    assert sum(len(r) for r in rows) == len(mixed.train)
    assert set().union(*rows) == set(mixed.train.index)
    assert all(a.isdisjoint(b) for i, a in enumerate(rows) for b in rows[i + 1:])
    test_rows = all_rows(part, "test")
    assert set().union(*test_rows) == set(mixed.test.index) and sum(map(len, test_rows)) == len(mixed.test)
    for c in part.clients:
        assert c.columns == mixed.schema.names and len(c.train) > 0
        assert c.train.equals(mixed.train.loc[c.train.index])  # values untouched
    again = partition(mixed, "horizontal", 5, seed=7, scheme=scheme, **opts)
    assert all(a.train.equals(b.train) for a, b in zip(part.clients, again.clients))
    other = partition(mixed, "horizontal", 5, seed=8, scheme=scheme, **opts)
    assert any(not a.train.index.equals(b.train.index) for a, b in zip(part.clients, other.clients))


def test_label_skew_gives_each_client_its_classes(cancer):
    part = partition(cancer, "horizontal", 5, seed=0, scheme="label-skew")
    classes = [set(c.train["target"].astype(int)) for c in part.clients]
    assert all(len(c) == 1 for c in classes) and set().union(*classes) == {0, 1}
    digits = load_dataset("digits")
    part = partition(digits, "horizontal", 4, seed=1, scheme="label-skew", classes_per_client=3)
    seen = [set(c.train["target"].astype(int)) for c in part.clients]
    assert all(len(s) == 3 for s in seen) and set().union(*seen) == set(range(10))


def test_dirichlet_skew_strength_follows_alpha(mixed):
    def mean_entropy(alpha):
        part = partition(mixed, "horizontal", 4, seed=0, scheme="dirichlet", alpha=alpha)
        ent = []
        for c in part.clients:
            p = np.bincount(c.train["y"].astype(int), minlength=2) / len(c.train)
            ent.append(-(p[p > 0] * np.log(p[p > 0])).sum())
        return np.mean(ent)
    assert mean_entropy(0.05) < mean_entropy(100.0)


def test_vertical_alignment_and_label(cancer):
    part = partition(cancer, "vertical", 3, seed=2)
    cols = [set(c.columns) - {"target"} for c in part.clients]
    assert set().union(*cols) == set(cancer.schema.feature_names)
    assert all(a.isdisjoint(b) for i, a in enumerate(cols) for b in cols[i + 1:])
    for c in part.clients:
        assert c.train.index.equals(cancer.train.index) and c.test.index.equals(cancer.test.index)
    assert [c.has_label for c in part.clients] == [True, False, False]
    shared = partition(cancer, "vertical", 3, seed=2, label_to="all")
    assert all(c.has_label for c in shared.clients)
    on_two = partition(cancer, "vertical", 3, seed=2, label_to="client-2")
    assert [c.has_label for c in on_two.clients] == [False, False, True]


def test_vertical_explicit_groups(cancer):
    names = cancer.schema.feature_names
    groups = ",".join(names[:10]) + ";" + ",".join(names[10:])
    part = partition(cancer, "vertical", 2, groups=groups)
    assert part.clients[1].columns == names[10:]
    with pytest.raises(FedpgmError, match="appear in more than one group"):
        partition(cancer, "vertical", 2, groups=[names[:11], names[10:]])
    with pytest.raises(FedpgmError, match="are in no group"):
        partition(cancer, "vertical", 2, groups=[names[:5], names[10:]])
    with pytest.raises(FedpgmError, match="unknown column"):
        partition(cancer, "vertical", 2, groups=[["nope"], names])
    with pytest.raises(FedpgmError, match="2 column groups given for 3 clients"):
        partition(cancer, "vertical", 3, groups=groups)


def test_hybrid_invariants(mixed):
    part = partition(mixed, "hybrid", 3, seed=4, shared=2, overlap=0.1)
    feats = set(mixed.schema.feature_names)
    held = {f: [c.client_id for c in part.clients if f in c.columns] for f in feats}
    assert all(held[f] for f in feats)  # coverage
    shared = [f for f, who in held.items() if len(who) > 1]
    single = [f for f, who in held.items() if len(who) == 1]
    assert len(shared) == 2 and single
    rows = all_rows(part)
    common = set.intersection(*rows)
    assert len(common) == round(0.1 * len(mixed.train))
    own = [r - common for r in rows]
    assert all(a.isdisjoint(b) for i, a in enumerate(own) for b in own[i + 1:])
    assert set().union(*rows) == set(mixed.train.index)
    # a shared column is held by two clients on different rows
    a, b = part.clients[0], part.clients[1]
    assert set(a.train.index) - set(b.train.index)
    assert detect_split(part.clients) == "hybrid"


def test_hybrid_without_overlap_has_disjoint_rows(mixed):
    part = partition(mixed, "hybrid", 2, seed=0, overlap=0.0)
    r0, r1 = all_rows(part)
    assert r0.isdisjoint(r1) and len(r0) + len(r1) == len(mixed.train)


@pytest.mark.parametrize("split, k, opts, message", [
    ("horizontal", 0, {}, "at least 1"),
    ("horizontal", 10_000, {}, "cannot be split across 10000 clients"),
    ("vertical", 40, {}, "30 feature columns cannot be split across 40"),
    ("hybrid", 1, {}, "at least 2 clients"),
    ("hybrid", 2, {"shared": 29}, "fewer than one private column"),
    ("hybrid", 2, {"overlap": 1.0}, r"overlap must lie in \[0, 1\)"),
    ("horizontal", 3, {"scheme": "dirichlet", "alpha": -1.0}, "alpha must be > 0"),
    ("horizontal", 3, {"scheme": "weird"}, "unknown horizontal scheme"),
    ("horizontal", 3, {"scheme": "label-skew", "classes_per_client": 3}, "between 1 and 2"),
    ("vertical", 2, {"label_to": "client-9"}, "is not a client"),
    ("vertical", 2, {"alpha": 1.0}, r"\['alpha'\] do not apply to a vertical split"),
    ("diagonal", 2, {}, "unknown split 'diagonal'"),
])
def test_bad_partition_requests(cancer, split, k, opts, message):
    with pytest.raises(FedpgmError, match=message):
        partition(cancer, split, k, **opts)


def test_label_skew_needs_a_label():
    ds = load_dataset("synthetic:gmm", rows=100)
    with pytest.raises(FedpgmError, match="needs a discrete label"):
        partition(ds, "horizontal", 2, scheme="label-skew")


def test_write_read_round_trip(tmp_path, mixed):
    part = partition(mixed, "hybrid", 3, seed=1)
    part.write(tmp_path / "p")
    man = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert man["split"] == "hybrid" and [c["id"] for c in man["clients"]] == ["client-0", "client-1", "client-2"]
    assert man["clients"][0]["train_rows"] == [int(i) for i in part.clients[0].train.index]
    text = (tmp_path / "p" / "client-0.csv").read_text().splitlines()
    assert text[0].startswith("row_id,")
    back = read_partition(tmp_path / "p")
    for a, b in zip(part.clients, back.clients):
        assert a.columns == b.columns
        pd.testing.assert_frame_equal(a.train, b.train, check_exact=False, rtol=1e-12)
        pd.testing.assert_frame_equal(a.test, b.test, check_exact=False, rtol=1e-12)
    assert back.schema == mixed.schema


def test_write_refuses_non_empty_folder_and_leaves_nothing_partial(tmp_path, mixed):
    part = partition(mixed, "vertical", 2)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "keep.txt").write_text("mine")
    with pytest.raises(FedpgmError, match="already exists and is not empty"):
        part.write(tmp_path / "p")
    assert [p.name for p in (tmp_path / "p").iterdir()] == ["keep.txt"]
    part.write(tmp_path / "p", overwrite=True)
    assert sorted(p.name for p in (tmp_path / "p").iterdir())[-1] == "manifest.json"
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]


def test_client_files_without_manifest(tmp_path, mixed):
    part = partition(mixed, "vertical", 2, seed=0)
    part.write(tmp_path / "p")
    files = sorted((tmp_path / "p").glob("client-?.csv"))
    loaded = load_client_files(files, label="y")
    assert [c.client_id for c in loaded.clients] == ["client-0", "client-1"]
    assert loaded.split == "vertical"
    assert loaded.clients[0].train.index.equals(part.clients[0].train.index)
    with_schema = load_client_files(files, schema=mixed.schema)
    pd.testing.assert_frame_equal(with_schema.clients[1].train, part.clients[1].train, rtol=1e-12)
    (tmp_path / "x.csv").write_text("row_id,zzz\n1,2\n")
    with pytest.raises(FedpgmError, match=r"column\(s\) \['zzz'\] not in the schema"):
        load_client_files([tmp_path / "x.csv"], schema=mixed.schema)


def test_read_partition_errors(tmp_path):
    with pytest.raises(FedpgmError, match="has no manifest.json"):
        read_partition(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format": "other"}')
    with pytest.raises(FedpgmError, match="not a fedpgm partition manifest"):
        read_partition(tmp_path)


def test_adult_hybrid_three_clients(data_dir):
    adult = load_dataset("adult", data_dir=data_dir)
    part = partition(adult, "hybrid", 3, seed=0)
    assert sum(len(c.train) for c in part.clients) > len(adult.train)  # the common block repeats
    assert set().union(*all_rows(part)) == set(adult.train.index)
