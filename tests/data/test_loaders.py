import json
import numpy as np
import pandas as pd
import pytest
from scipy.special import logsumexp

from fedpgm.data import dataset_names, load_dataset
from fedpgm.data.registry import LoadOptions
from fedpgm.errors import FedpgmError


@pytest.mark.parametrize("name, rows, cols, classes", [
    ("breast_cancer", 569, 31, 2), ("digits", 1797, 65, 10), ("wine", 178, 14, 3)])
def test_sklearn_tables(name, rows, cols, classes):
    ds = load_dataset(name, seed=3)
    assert ds.n_rows == rows and len(ds.schema) == cols
    assert ds.schema[ds.schema.label].cardinality == classes
    assert set(ds.train.index).isdisjoint(ds.test.index)
    assert len(ds.test) == int(np.ceil(0.2 * rows))
    # stratified: class proportions agree within one row per class
    tr = np.bincount(ds.labels("train"), minlength=classes) / len(ds.train)
    te = np.bincount(ds.labels("test"), minlength=classes) / len(ds.test)
    assert np.abs(tr - te).max() < 2 / len(ds.test) + 0.01


def test_split_is_reproducible_by_seed():
    a, b, c = (load_dataset("wine", seed=s) for s in (1, 1, 2))
    assert a.test.index.equals(b.test.index) and a.test.equals(b.test)
    assert not a.test.index.equals(c.test.index)


def test_test_size_option_and_bad_value():
    ds = load_dataset("breast_cancer", test_size=0.5)
    assert abs(len(ds.test) - 569 / 2) <= 1
    with pytest.raises(FedpgmError, match=r"test_size must be a fraction in \(0, 1\) or a row count"):
        load_dataset("breast_cancer", test_size=1.5)


def test_unknown_dataset_and_inapplicable_option():
    with pytest.raises(FedpgmError, match="unknown dataset 'iris'.*breast_cancer"):
        load_dataset("iris")
    with pytest.raises(FedpgmError, match=r"option\(s\) \['rows'\] do not apply to dataset 'wine'"):
        load_dataset("wine", rows=10)
    with pytest.raises(FedpgmError, match="needs an argument after ':'"):
        load_dataset("bn:")


def test_missing_data_dir_names_the_expected_file(tmp_path):
    with pytest.raises(FedpgmError, match="needs the file .*adult/adult.data"):
        load_dataset("adult", data_dir=tmp_path)
    with pytest.raises(FedpgmError, match="cs-training.csv"):
        load_dataset("credit", data_dir=tmp_path)
    with pytest.raises(FedpgmError, match="does not exist; pass an existing --data-dir"):
        load_dataset("adult", data_dir=tmp_path / "nope")


def test_adult(data_dir):
    ds = load_dataset("adult", data_dir=data_dir)
    assert (len(ds.train), len(ds.test)) == (32561, 16281)
    assert ds.schema["income"].categories == ("<=50K", ">50K")  # no trailing "." from adult.test
    assert ds.schema["sex"].kind == "binary" and ds.schema["education-num"].kind == "ordinal"
    assert "?" not in ds.schema["workclass"].categories
    assert int(ds.train["workclass"].isna().sum()) == 1836  # UCI's "?" rows are NaN
    assert 0.23 < ds.labels("test").mean() < 0.24
    imputed = load_dataset("adult", data_dir=data_dir, missing="impute")
    assert not imputed.train.isna().any().any() and not imputed.test.isna().any().any()
    mode = ds.train["workclass"].mode().iloc[0]
    assert (imputed.train.loc[ds.train["workclass"].isna(), "workclass"] == mode).all()


def test_credit(data_dir):
    ds = load_dataset("credit", data_dir=data_dir, seed=0)
    assert ds.n_rows == 150000 and len(ds.schema) == 11
    rows = pd.concat([ds.train, ds.test])
    assert rows.index.min() == 1 and rows.index.max() == 150000  # the file's row-id column
    for col in ("NumberOfTimes90DaysLate", "NumberOfTime30-59DaysPastDueNotWorse"):
        assert not rows[col].isin([96, 98]).any()
        assert rows[col].max() < 96
    assert int(rows["MonthlyIncome"].isna().sum()) == 29731
    assert rows["NumberOfDependents"].isna().sum() == 3924
    assert 0.066 < ds.labels("train").mean() < 0.068
    imputed = load_dataset("credit", data_dir=data_dir, missing="impute")
    assert not imputed.test.isna().any().any()


def test_debd_by_name(data_dir):
    ds = load_dataset("debd:nltcs", data_dir=data_dir)
    assert (len(ds.train), len(ds.valid), len(ds.test)) == (16181, 2157, 3236)
    assert len(ds.schema) == 16 and ds.schema.label is None
    assert set(np.unique(ds.train.to_numpy())) <= {0.0, 1.0}
    assert "debd:nltcs" in dataset_names(LoadOptions(data_dir=data_dir))


def test_debd_by_path_and_errors(tmp_path):
    rng = np.random.default_rng(0)
    for part, n in (("train", 30), ("valid", 5), ("test", 7)):
        np.savetxt(tmp_path / f"toy.{part}.data", rng.integers(0, 2, (n, 4)), fmt="%d", delimiter=",")
    ds = load_dataset(f"debd:{tmp_path}/toy")
    assert (len(ds.train), len(ds.valid), len(ds.test)) == (30, 5, 7)
    assert ds.schema.names == ["x0", "x1", "x2", "x3"]
    assert ds.test.index.min() == 35  # row ids are unique across the three files
    np.savetxt(tmp_path / "bad.train.data", [[0, 2]], fmt="%d", delimiter=",")
    for part in ("valid", "test"):
        np.savetxt(tmp_path / f"bad.{part}.data", [[0, 1]], fmt="%d", delimiter=",")
    with pytest.raises(FedpgmError, match="values other than 0 and 1"):
        load_dataset(f"debd:{tmp_path}/bad")
    with pytest.raises(FedpgmError, match=r"needs the file .*none\.train\.data"):
        load_dataset(f"debd:{tmp_path}/none")


def test_bn_sampling_codes_graph_and_seed():
    a = load_dataset("bn:asia", rows=600, seed=5)
    b = load_dataset("bn:asia", rows=600, seed=5)
    c = load_dataset("bn:asia", rows=600, seed=6)
    assert a.n_rows == 600 and a.schema.label == "dysp"
    assert pd.concat([a.train, a.test]).equals(pd.concat([b.train, b.test]))
    assert not pd.concat([a.train, a.test]).sort_index().equals(pd.concat([c.train, c.test]).sort_index())
    assert a.graph.number_of_nodes() == 8 and a.graph.number_of_edges() == 8
    assert a.graph.has_edge("either", "dysp")
    # tub is rare (p(tub=yes) ~ 0.0104 in asia): the sample agrees
    yes = a.schema["tub"].categories.index("yes")
    assert (pd.concat([a.train, a.test])["tub"] == yes).mean() < 0.05
    other = load_dataset("bn:sachs", rows=200, label="Erk")
    assert other.schema.label == "Erk" and other.schema["Akt"].cardinality == 3


def test_bn_sampling_prints_no_pgmpy_deprecation_warning():
    import subprocess
    import sys

    code = "from fedpgm.data import load_dataset; load_dataset('bn:asia', rows=50)"
    run = subprocess.run([sys.executable, "-W", "error::FutureWarning", "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and "FutureWarning" not in run.stderr, run.stderr[-2000:]


def test_bn_unknown_network():
    with pytest.raises(FedpgmError, match="unknown network 'nope'; pgmpy ships: .*asia"):
        load_dataset("bn:nope")


def test_csv_inferred_and_explicit_schema(tmp_path):
    path = tmp_path / "t.csv"
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"x": rng.normal(size=40), "colour": rng.choice(["r", "g", "b"], 40),
                          "y": rng.choice(["no", "yes"], 40)})
    frame.loc[2, "x"] = np.nan
    frame.to_csv(path, index=False)
    ds = load_dataset(f"csv:{path}", label="y", seed=0)
    assert ds.schema.label == "y" and ds.schema["colour"].kind == "categorical"
    assert "colour: categorical" in ds.info["schema_source"]
    assert ds.n_rows == 40 and ds.train["x"].isna().sum() + ds.test["x"].isna().sum() == 1
    ds.schema.save(tmp_path / "schema.json")
    again = load_dataset(f"csv:{path}", schema=tmp_path / "schema.json")
    assert again.schema == ds.schema and again.train.equals(ds.train)


@pytest.mark.parametrize("content, message", [
    (b"a,b,a\n1,2,3\n", r"repeats column name\(s\) \['a'\]"),
    (b"\xff\xfe\x00garbage\x00\n\x00", "cannot read"),
    (b"", "cannot read"),
])
def test_csv_bad_files(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    with pytest.raises(FedpgmError, match=message):
        load_dataset(f"csv:{path}", label="y" if b"x,y" in content else None)


def test_csv_missing_file():
    with pytest.raises(FedpgmError, match="CSV file /no/such.csv does not exist"):
        load_dataset("csv:/no/such.csv")


def test_synthetic_gmm_truth_matches_its_samples():
    ds = load_dataset("synthetic:gmm", rows=20000, seed=0)
    truth = ds.truth
    x = pd.concat([ds.train, ds.test]).to_numpy()
    assert np.allclose(x.mean(axis=0), truth.weights @ truth.means, atol=0.1)
    # the true density integrates to 1: Monte-Carlo estimate of E_p[1] via importance sampling
    # from the mixture itself gives the entropy; a shifted sample must score lower.
    ll = truth.log_density(ds.test).mean()
    assert ll > truth.log_density(ds.test + 5.0).mean() + 1.0
    same = load_dataset("synthetic:gmm", rows=20000, seed=1)
    assert np.allclose(same.truth.means, truth.means)  # the distribution does not depend on seed
    assert abs(truth.log_density(same.test).mean() - ll) < 0.1


def test_synthetic_mixed_truth_marginalises_nan():
    ds = load_dataset("synthetic:mixed", rows=200, seed=0)
    truth, rows = ds.truth, ds.test.iloc[:5].copy()
    feat = ds.schema["k0"]
    per_value = np.stack([truth.log_density(rows.assign(k0=float(v))) for v in range(feat.cardinality)])
    marginal = truth.log_density(rows.assign(k0=np.nan))
    assert np.allclose(logsumexp(per_value, axis=0), marginal, atol=1e-10)
    assert ds.schema.label == "y" and ds.schema["o0"].kind == "ordinal"


def test_tiny_tables_split_without_stratification_or_say_why(tmp_path):
    path = tmp_path / "tiny.csv"
    path.write_text("age,outcome\n30,yes\n40,no\n35,yes\n50,no\n")  # 4 rows, 2 classes: 1 test row
    ds = load_dataset(f"csv:{path}", label="outcome")
    assert len(ds.train) == 3 and len(ds.test) == 1
    path.write_text("age,outcome\n30,yes\n")
    with pytest.raises(FedpgmError, match=r"a table of 1 row\(s\) cannot be split"):
        load_dataset(f"csv:{path}", label="outcome")


def id_table(n=40, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"carat": rng.uniform(0.2, 2, n).round(2), "count": rng.permutation(n) + 5,
                         "cut": rng.choice(["Fair", "Good", "Ideal"], n)})


def test_csv_row_id_columns_are_left_out_with_a_note(tmp_path, capsys):
    import csv

    r_export = id_table()
    r_export.insert(0, "rownames", np.arange(1, 41))
    r_export.to_csv(tmp_path / "r.csv", index=False, quoting=csv.QUOTE_NONNUMERIC)
    assert (tmp_path / "r.csv").read_text().startswith('"rownames","carat"')
    ds = load_dataset(f"csv:{tmp_path / 'r.csv'}", label="cut")
    assert ds.schema.names == ["carat", "count", "cut"]  # count: unique integers, shuffled: kept
    assert sorted(ds.train.index.append(ds.test.index)) == list(range(1, 41))  # rownames is the row_id
    err = capsys.readouterr().err.strip()
    assert err == ("note: column 'rownames' looks like a row id (unique per row); used as the row_id "
                   "and left out (use --keep rownames to model it)")
    id_table().to_csv(tmp_path / "p.csv")  # pandas' unnamed index: header ",carat,..."
    ds = load_dataset(f"csv:{tmp_path / 'p.csv'}")
    assert ds.schema.names == ["carat", "count", "cut"]
    assert "the unnamed column looks like a row id" in capsys.readouterr().err
    ds = load_dataset(f"csv:{tmp_path / 'r.csv'}", label="rownames")  # the label is never left out
    assert "rownames" in ds.schema and capsys.readouterr().err == ""


def test_csv_keep_option_through_the_cli(tmp_path, cli):
    frame = id_table()
    frame.insert(0, "id", np.arange(40))
    frame.to_csv(tmp_path / "t.csv", index=False)
    code, out, err = cli("schema", f"csv:{tmp_path / 't.csv'}", "--label", "cut", "--out", tmp_path / "s.json")
    assert code == 0 and "note: column 'id' looks like a row id" in err
    names = [f["name"] for f in json.loads((tmp_path / "s.json").read_text())["features"]]
    assert names == ["carat", "count", "cut"]
    code, out, err = cli("schema", f"csv:{tmp_path / 't.csv'}", "--keep", "id", "--out", tmp_path / "k.json")
    assert code == 0 and err == ""
    assert [f["name"] for f in json.loads((tmp_path / "k.json").read_text())["features"]][0] == "id"
    code, out, err = cli("schema", f"csv:{tmp_path / 't.csv'}", "--keep", "idd")
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: --keep idd: no such column")
    assert "['id', 'carat', 'count', 'cut']" in err
    assert load_dataset(f"csv:{tmp_path / 't.csv'}", schema=tmp_path / "s.json").schema.names == names  # id not in it
    with pytest.raises(FedpgmError, match=r"\['keep'\] do not apply to dataset 'wine'"):
        load_dataset("wine", keep=["x"])


def test_csv_rows_without_a_label_are_left_out_with_a_note(tmp_path, capsys):
    frame = pd.DataFrame({"x": np.arange(30.0), "z": np.arange(30.0) ** 2 % 7,
                          "y": ["a", "b", None] * 10})  # every third row unlabelled
    frame.to_csv(tmp_path / "t.csv", index=False)
    ds = load_dataset(f"csv:{tmp_path / 't.csv'}", label="y")
    rows = pd.concat([ds.train, ds.test])
    assert len(rows) == 20 and not rows["y"].isna().any()
    assert sorted(rows["x"]) == [float(i) for i in range(30) if i % 3 != 2]  # exactly the labelled rows
    assert "10 of 30 rows have no 'y' and are left out" in capsys.readouterr().err
    assert not load_dataset(f"csv:{tmp_path / 't.csv'}", label="x").train["x"].isna().any()  # (no note needed)
    frame.assign(y=None).to_csv(tmp_path / "none.csv", index=False)
    with pytest.raises(FedpgmError, match="column 'y' has no values; drop it"):
        load_dataset(f"csv:{tmp_path / 'none.csv'}", label="y")
