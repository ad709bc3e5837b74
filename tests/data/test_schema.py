import json

import numpy as np
import pandas as pd
import pytest

from fedpgm.data.schema import Feature, Schema, infer_schema
from fedpgm.errors import FedpgmError


def make_schema():
    return Schema((Feature("age", "continuous"), Feature("sex", "binary", ("F", "M")),
                   Feature("city", "categorical", ("a", "b", "c")),
                   Feature("grade", "ordinal", (1, 2, 3)),
                   Feature("y", "binary", (0, 1))), label="y")


def test_duplicate_names_are_rejected_with_their_names():
    with pytest.raises(FedpgmError, match=r"duplicate feature names \['x'\]"):
        Schema((Feature("x", "continuous"), Feature("x", "binary", ("0", "1"))))


@pytest.mark.parametrize("feature, message", [
    (lambda: Feature("b", "binary", ("0", "1", "2")), "exactly 2"),
    (lambda: Feature("c", "categorical"), "needs its list of categories"),
    (lambda: Feature("c", "continuous", ("a",)), "cannot have categories"),
    (lambda: Feature("c", "nominal", ("a",)), "unknown type 'nominal'"),
    (lambda: Feature("c", "categorical", ("a", "a")), "twice"),
    (lambda: Feature("row_id", "continuous"), "reserved"),
])
def test_bad_features(feature, message):
    with pytest.raises(FedpgmError, match=message):
        feature()


def test_label_must_be_a_column():
    with pytest.raises(FedpgmError, match="label 'z' is not a column"):
        Schema((Feature("x", "continuous"),), label="z")


def test_encode_decode_round_trip_and_codes():
    s = make_schema()
    raw = pd.DataFrame({"age": [30.5, None, 41], "sex": ["M", "F", None], "city": ["c", "a", "b"],
                        "grade": [3, 1.0, 2], "y": [1, 0, 1]})
    enc = s.encode(raw)
    assert enc["sex"].tolist()[:2] == [1.0, 0.0] and np.isnan(enc["sex"].iloc[2])
    assert enc["city"].tolist() == [2.0, 0.0, 1.0]
    assert enc["grade"].tolist() == [2.0, 0.0, 1.0]  # 1.0 and 1 are the same category
    s.validate_frame(enc)
    dec = s.decode(enc)
    assert dec["city"].tolist() == ["c", "a", "b"] and pd.isna(dec["sex"].iloc[2])
    assert s.encode(dec).equals(enc)


def test_encode_rejects_unknown_category_and_text_in_numbers():
    s = make_schema()
    raw = pd.DataFrame({"age": [1.0], "sex": ["X"], "city": ["a"], "grade": [1], "y": [0]})
    with pytest.raises(FedpgmError, match="'sex' holds 'X'"):
        s.encode(raw)
    raw = pd.DataFrame({"age": ["old"], "sex": ["F"], "city": ["a"], "grade": [1], "y": [0]})
    with pytest.raises(FedpgmError, match="'age' is continuous but holds text 'old'"):
        s.encode(raw)


def test_validate_frame_catches_bad_codes_columns_and_nan_labels():
    s = make_schema()
    good = pd.DataFrame({"age": [1.0], "sex": [1.0], "city": [2.0], "grade": [0.0], "y": [1.0]})
    s.validate_frame(good)
    with pytest.raises(FedpgmError, match="code 3.0 outside 0..2"):
        s.validate_frame(good.assign(city=[3.0]))
    with pytest.raises(FedpgmError, match=r"unknown \['zip'\], missing \['city'\]"):
        s.validate_frame(good.drop(columns="city").assign(zip=[1.0]))
    with pytest.raises(FedpgmError, match="label column 'y' has 1 missing"):
        s.validate_frame(good.assign(y=[np.nan]))


def test_json_round_trip(tmp_path):
    s = make_schema()
    s.save(tmp_path / "s.json")
    assert Schema.load(tmp_path / "s.json") == s
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(FedpgmError, match="not valid JSON"):
        Schema.load(tmp_path / "bad.json")
    assert json.loads((tmp_path / "s.json").read_text())["label"] == "y"


def test_select_keeps_order_and_label():
    s = make_schema()
    sub = s.select(["y", "age"])
    assert sub.names == ["age", "y"] and sub.label == "y"
    assert s.select(["city"]).label is None
    with pytest.raises(FedpgmError, match="unknown column"):
        s.select(["nope"])


def test_infer_schema_types_and_reasons():
    rng = np.random.default_rng(0)
    raw = pd.DataFrame({
        "income": rng.normal(size=50),
        "smoker": rng.choice(["yes", "no"], 50),
        "flag": rng.choice([0, 1], 50),
        "stage": rng.choice([1, 2, 3, 4], 50),
        "city": rng.choice(["a", "b", "c"], 50),
    })
    raw.loc[3, "income"] = np.nan
    schema, reasons = infer_schema(raw, label="smoker")
    kinds = {f.name: f.kind for f in schema.features}
    assert kinds == {"income": "continuous", "smoker": "binary", "flag": "binary",
                     "stage": "ordinal", "city": "categorical"}
    assert schema["stage"].categories == ("1", "2", "3", "4")
    assert schema["city"].categories == ("a", "b", "c")
    assert schema.label == "smoker"
    assert "4 levels" in reasons["stage"] and "distinct" in reasons["income"]


def test_infer_rejects_empty_column_and_unknown_label():
    with pytest.raises(FedpgmError, match="column 'e' has no values"):
        infer_schema(pd.DataFrame({"e": [np.nan, np.nan], "x": [1.0, 2.0]}))
    with pytest.raises(FedpgmError, match="label 'z' is not a column"):
        infer_schema(pd.DataFrame({"x": [1.0]}), label="z")


def test_a_stray_string_in_a_numeric_column_is_an_error_not_a_category(tmp_path, cli):
    rng = np.random.default_rng(0)
    ages = [str(round(v, 1)) for v in rng.uniform(20, 80, 60)]
    ages[7], ages[31] = "unknown", "?"
    raw = pd.DataFrame({"age": ages, "y": rng.choice(["a", "b"], 60)})
    with pytest.raises(FedpgmError, match=r"column 'age' is numeric except for 2 cell\(s\) such as \['\?', 'unknown'\]"):
        infer_schema(raw)
    codes = pd.DataFrame({"code": ["1", "2", "3", "other"] * 15})  # few numbers: a real category
    assert infer_schema(codes)[0]["code"].kind == "categorical"
    raw.to_csv(tmp_path / "t.csv", index=False)
    code, _, err = cli("pc", "fit", f"csv:{tmp_path / 't.csv'}", "--label", "y")
    assert code == 2 and "column 'age' is numeric except for" in err


def test_id_columns_by_name_or_monotone_integers():
    from fedpgm.data.schema import id_columns

    rng = np.random.default_rng(0)
    n = 30
    raw = pd.DataFrame({
        "rownames": np.arange(1, n + 1), "Unnamed: 0": np.arange(n), "customer_id": rng.permutation(n),
        "CODE.ID": [f"c{i}" for i in rng.permutation(n)], "seq": np.arange(10, 10 + n),
        "sorted": np.arange(10, 10 + 2 * n, 2),  # unique, sorted, not consecutive: a feature
        "shuffled": rng.permutation(n),  # unique integers, not monotone: a feature
        "ratio": np.linspace(0, 1, n),  # unique and sorted but not integers: a feature
        "id": [1, 1] + list(range(2, n)),  # named like an id but repeats a value: a feature
        "y": rng.choice(["a", "b"], n),
    })
    assert id_columns(raw) == ["rownames", "Unnamed: 0", "customer_id", "CODE.ID", "seq"]
    assert id_columns(raw, label="rownames", keep=["seq"]) == ["Unnamed: 0", "customer_id", "CODE.ID"]
    assert id_columns(pd.DataFrame({"age": [30, 31, 32, 33]})) == []  # too few rows to call it an id
