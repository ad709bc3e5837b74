import numpy as np
import pytest

from fedpgm.data import load_dataset, partition
from fedpgm.federation import InProcessFederation, Message, PrivacyAudit, PrivacyViolation
from fedpgm.federation.reference import federated_moments


@pytest.fixture(scope="module")
def setup():
    ds = load_dataset("breast_cancer", seed=0)
    part = partition(ds, "vertical", 2, seed=0)
    return part, PrivacyAudit(part)


def test_clean_statistics_pass(setup):
    part, audit = setup
    c = part["client-0"]
    x = c.train.to_numpy()
    audit.check("client-0", Message("stats", {"mean": x.mean(0), "cov": np.cov(x.T)}, {"n": len(x)}))


def test_raw_row_is_caught_anywhere(setup):
    part, audit = setup
    c = part["client-1"]
    row = c.train.iloc[17].to_numpy()
    hidden = np.concatenate([np.random.default_rng(0).normal(size=101), row, np.ones(3)])
    with pytest.raises(PrivacyViolation, match="client 'client-1' message 'm' array 'w' contains row"):
        audit.check("client-1", Message("m", {"w": hidden.reshape(1, -1)}))
    with pytest.raises(PrivacyViolation, match="row"):
        audit.check("client-1", Message("m", {"w": row.astype(np.float32)}))  # float32 copy
    with pytest.raises(PrivacyViolation, match="config contains row"):
        audit.check("client-1", Message("m", config={"nested": {"v": [0.5, *row.tolist()]}}))
    test_row = c.test.iloc[3].to_numpy()
    with pytest.raises(PrivacyViolation, match="row"):
        audit.check("client-1", Message("m", {"t": test_row}))


def test_raw_column_run_is_caught_but_short_runs_pass(setup):
    part, audit = setup
    c = part["client-0"]
    col = c.schema.feature_names[0]
    values = c.train[col].to_numpy()
    audit.check("client-0", Message("m", {"few": values[10:15]}))  # 5 values: a handful
    with pytest.raises(PrivacyViolation, match=f"consecutive values of column '{col}'"):
        audit.check("client-0", Message("m", {"many": values[10:40]}))


def test_another_clients_data_is_not_this_clients_leak(setup):
    part, audit = setup
    other_row = part["client-1"].train.iloc[0].to_numpy()
    audit.check("client-0", Message("m", {"x": other_row}))


def test_reference_algorithm_refuses_to_reveal_a_single_row():
    ds = load_dataset("wine", seed=0)
    part = partition(ds, "horizontal", 2, seed=0)
    tiny = part.clients[0]
    tiny.train = tiny.train.iloc[:1]
    audit = PrivacyAudit(part)
    with InProcessFederation(part, "fedpgm.federation.reference:HANDLERS", mode="sequential",
                             audit=audit) as fed:
        res = federated_moments(fed)
        assert "client-0" in res["failed"] and "min_rows" in res["failed"]["client-0"]
        # without the guard, the one-row "mean" is the raw row, and the audit catches it
        with pytest.raises(PrivacyViolation, match="client 'client-0'.*contains row"):
            fed.send("client-0", "moments", config={"columns": tiny.columns, "min_rows": 1})


def test_low_entropy_discrete_rows_are_not_patterns_but_wide_ones_are():
    asia = load_dataset("bn:asia", rows=400, seed=0)
    small = partition(asia, "vertical", 2, seed=0)  # 4-5 binary columns: < 2^16 possible rows
    audit = PrivacyAudit(small)
    row = small["client-0"].train.iloc[0].to_numpy()
    audit.check("client-0", Message("m", config={"children": [*row.tolist(), 7]}))
    rng = np.random.default_rng(0)
    import pandas as pd
    from fedpgm.data.partition import ClientData
    from fedpgm.data.schema import Feature, Schema
    schema = Schema(tuple(Feature(f"b{i}", "binary", ("0", "1")) for i in range(20)))
    table = pd.DataFrame(rng.integers(0, 2, (50, 20)).astype(float), columns=schema.names)
    client = ClientData("c", schema, table)
    with pytest.raises(PrivacyViolation, match="row"):
        PrivacyAudit([client]).check("c", Message("m", {"x": table.iloc[3].to_numpy()}))
