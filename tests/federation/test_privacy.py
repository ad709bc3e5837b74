import numpy as np
import pytest

from fedpgm.data import load_dataset, partition
from fedpgm.data.policy import ClientPolicy
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


def test_a_row_among_many_arrays_is_named_by_its_array_and_the_joins_between_arrays_match_nothing(setup):
    part, audit = setup
    c = part["client-1"]
    row = c.train.iloc[17].to_numpy()
    rng = np.random.default_rng(1)
    arrays = {f"layer{i}.weight": rng.normal(size=(4, 3)) for i in range(30)}
    audit.check("client-1", Message("m", arrays))  # weights alone are clean
    with pytest.raises(PrivacyViolation, match="array 'layer23.weight' contains row"):
        audit.check("client-1", Message("m", {**arrays, "layer23.weight": np.concatenate([row, [0.5]])}))
    half = len(row) // 2  # a row cut across two arrays is in neither (as when arrays were searched apart)
    audit.check("client-1", Message("m", {**arrays, "a": row[:half], "b": row[half:]}))


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
        # the server asking for min_rows 1 does not lower the client's floor (10 by default)
        reply = fed.send("client-0", "moments", config={"columns": tiny.columns, "min_rows": 1})
        assert "min_rows=10" in reply.failures["client-0"].detail
    # a client whose own policy allows one row still runs the audit on its reply before it leaves
    tiny.policy = ClientPolicy(min_rows=1)
    with InProcessFederation(part, "fedpgm.federation.reference:HANDLERS", mode="sequential") as fed:
        reply = fed.send("client-0", "moments", config={"columns": tiny.columns, "min_rows": 1})
        assert "PrivacyViolation" in reply.failures["client-0"].detail
        assert "contains row" in reply.failures["client-0"].detail
    # and with the client's audit switched off, the server-side audit sees the raw row
    tiny.policy = ClientPolicy(min_rows=1, audit=False)
    with InProcessFederation(part, "fedpgm.federation.reference:HANDLERS", mode="sequential",
                             audit=audit) as fed:
        with pytest.raises(PrivacyViolation, match="client 'client-0'.*contains row"):
            fed.send("client-0", "moments", config={"columns": tiny.columns, "min_rows": 1})


def test_an_experiments_audit_checks_only_the_clients_that_do_not_audit_themselves():
    ds = load_dataset("wine", seed=0)
    part = partition(ds, "horizontal", 2, seed=0)
    tiny = part.clients[0]
    tiny.train = tiny.train.iloc[:1]
    tiny.policy = ClientPolicy(min_rows=1, audit=False)
    harness = PrivacyAudit.beside_policies(part)
    assert list(harness.patterns) == ["client-0"]  # client-1 checks its own replies: not twice
    with InProcessFederation(part, "fedpgm.federation.reference:HANDLERS", mode="sequential",
                             audit=harness) as fed:
        fed.send("client-1", "moments", config={"columns": tiny.columns})
        with pytest.raises(PrivacyViolation, match="client 'client-0'.*contains row"):
            fed.send("client-0", "moments", config={"columns": tiny.columns, "min_rows": 1})
    assert harness.checked == 2  # both replies counted


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


# -- the leaks of issue 23, point 4: each caught by the audit --------------------------------

@pytest.fixture(scope="module")
def cancer():
    return partition(load_dataset("breast_cancer", seed=0), "horizontal", 2, seed=0)


def client_table(part, cid="client-0"):
    c = part[cid]
    return c, c.train[c.schema.names].to_numpy(dtype=float)


@pytest.mark.parametrize("leak", ["column x 2", "column + 1e-3", "column in mm (x 1000) - 7", "negated column",
                                  "column as float32", "sorted column", "a dense run of the sorted column",
                                  "reversed sorted column", "reordered columns", "table without its label",
                                  "one row, columns shuffled"])
def test_transformed_copies_are_caught(cancer, leak):
    c, x = client_table(cancer)
    col = x[:, 3]
    rng = np.random.default_rng(1)
    payload = {
        "column x 2": col[:40] * 2,
        "column + 1e-3": col[100:140] + 1e-3,
        "column in mm (x 1000) - 7": col * 1000 - 7,
        "negated column": -col[5:30],
        "column as float32": col[:20].astype(np.float32),
        "sorted column": np.sort(col),
        "a dense run of the sorted column": np.unique(col)[100:140],
        "reversed sorted column": np.sort(col)[::-1].astype(np.float32),
        "reordered columns": x[:, rng.permutation(x.shape[1])][:3].reshape(-1),
        "table without its label": np.delete(x, c.schema.index(c.schema.label), axis=1)[:2].reshape(-1),
        "one row, columns shuffled": x[7][rng.permutation(x.shape[1])],
    }[leak]
    noise = rng.normal(size=50)
    with pytest.raises(PrivacyViolation, match="client 'client-0'"):
        PrivacyAudit([c]).check("client-0", Message("m", {"w": np.concatenate([noise, payload, noise])}))


def test_discrete_tables_are_caught_but_their_statistics_pass():
    asia = load_dataset("bn:asia", rows=600, seed=0)
    c = partition(asia, "horizontal", 1, seed=0).clients[0]
    table = c.train[c.schema.names].to_numpy(dtype=float)
    audit = PrivacyAudit([c])
    for leak in (table[:40].reshape(-1), table[100:140].reshape(-1).astype(np.float32)):
        with pytest.raises(PrivacyViolation, match="consecutive rows"):
            audit.check(c.client_id, Message("m", {"t": leak}))
    without_label = np.delete(table, c.schema.index(c.schema.label), axis=1)
    with pytest.raises(PrivacyViolation, match="consecutive rows without the label"):
        audit.check(c.client_id, Message("m", {"t": without_label[10:60].reshape(-1)}))
    counts = np.stack([np.bincount(table[:, j].astype(int), minlength=2) for j in range(table.shape[1])])
    audit.check(c.client_id, Message("m", {"counts": counts, "first": table[0], "cpt": counts / counts.sum(1, keepdims=True)}))


def test_quantiles_and_index_lists_of_an_integer_column_are_not_raw_values():
    """The NGM layout sends each numeric column's quantiles; an integer column's quantiles once
    matched a run of its raw values (issue 23/28). Sorted runs are searched only for columns of
    mostly distinct values, and runs need as many values as make a chance match unlikely."""
    rng = np.random.default_rng(0)
    hours = np.clip(np.round(rng.normal(40, 12, 3000)), 1, 99)
    hours[rng.random(3000) < 0.45] = 40
    import pandas as pd
    from fedpgm.data.partition import ClientData
    from fedpgm.data.schema import Feature, Schema
    gain = np.where(rng.random(3000) < 0.92, 0.0, np.round(rng.lognormal(8, 1, 3000)))  # capital-gain
    schema = Schema((Feature("hours", "continuous"), Feature("age", "continuous"), Feature("gain", "continuous")))
    frame = pd.DataFrame({"hours": hours, "age": np.round(rng.uniform(17, 90, 3000)), "gain": gain})
    c = ClientData("c", schema, frame)
    audit = PrivacyAudit([c])
    quantiles = np.quantile(hours, np.linspace(0, 1, 101))
    gains = np.quantile(gain, np.linspace(0, 1, 101))  # 92 zeros, then a few amounts: a one-hot shape
    audit.check("c", Message("layout", {"q": quantiles, "g": gains, "edges": np.arange(0, 100.0),
                                        "children": np.arange(500)}))

    with pytest.raises(PrivacyViolation, match="column 'hours'"):
        audit.check("c", Message("m", {"leak": hours[:40]}))


@pytest.mark.parametrize("leak", ["sorted column", "a sorted run, scaled and shifted", "reversed sorted column"])
def test_sorted_copies_of_a_continuous_column_are_caught(leak):
    import pandas as pd
    from fedpgm.data.partition import ClientData
    from fedpgm.data.schema import Feature, Schema
    values = np.random.default_rng(2).normal(size=400)
    smooth = ClientData("s", Schema((Feature("v", "continuous"),)), pd.DataFrame({"v": values}))
    payload = {"sorted column": np.sort(values), "a sorted run, scaled and shifted": np.sort(values)[100:130] * 3 + 1,
               "reversed sorted column": -np.sort(values)[::-1][:40]}[leak]
    with pytest.raises(PrivacyViolation, match="consecutive sorted values of column 'v'"):
        PrivacyAudit([smooth]).check("s", Message("m", {"w": payload}))


def test_a_column_with_runs_of_whole_numbers_does_not_flag_a_circuits_child_indices():
    """Credit's DebtRatio: ratios to 6 decimals, and where income is missing, whole dollar amounts.
    A run of those is a list of increasing integers, like a circuit's child lists, which the audit
    once refused as a sorted copy (exactly, and up to scale and shift). A real sorted copy of the
    6-decimal values (scaled) is still caught."""
    import pandas as pd
    from fedpgm.data.partition import ClientData
    from fedpgm.data.schema import Feature, Schema
    rng = np.random.default_rng(4)
    values = np.concatenate([np.round(rng.uniform(0, 2, 3000), 6), np.arange(4000.0, 4060.0)[rng.random(60) < 0.8]])
    client = ClientData("c", Schema((Feature("ratio", "continuous"),)), pd.DataFrame({"ratio": rng.permutation(values)}))
    audit = PrivacyAudit([client])
    children = [1, 2, 3, 4, 5, 6, 8, 9, 10, 13, 14, 15, 16, 17, 19, 20, 22, 23, 24, 25]  # a product's
    children += list(range(4010, 4030))  # ids as large as the dollar amounts: an exact match before
    audit.check("c", Message("fit", config={"nodes": [{"type": "product", "children": children}]}))
    with pytest.raises(PrivacyViolation, match="consecutive sorted values of column 'ratio'"):
        audit.check("c", Message("m", {"w": np.sort(values)[:200] * 2}))


def test_wide_rows_in_any_order_are_caught_without_sorting_every_window():
    """Image rows (64 and 784 pixels, wider than a sorted window is ever compared whole): a
    shuffled copy of one hidden in a large parameter array is found; the array without it passes."""
    from fedpgm.data.images import pixel_name
    from fedpgm.data.partition import ClientData
    from fedpgm.data.schema import Feature, Schema

    rng = np.random.default_rng(0)
    for side in (8, 28):
        schema = Schema(tuple(Feature(pixel_name(r, c), "continuous") for r in range(side) for c in range(side)),
                        pixel_levels=256)
        import pandas as pd
        rows = rng.integers(0, 256, (50, side * side)).astype(float)
        rows[:, : side * side // 2] = 0  # mostly dark, as digits are
        client = ClientData("c", schema, pd.DataFrame(rows, columns=schema.names))
        audit = PrivacyAudit([client])
        params = rng.normal(size=300_000)
        audit.check("c", Message("fit", {"w": params}))
        leaked = params.copy()
        leaked[1000:1000 + side * side] = rng.permutation(rows[7])
        with pytest.raises(PrivacyViolation, match="contains row"):
            audit.check("c", Message("fit", {"w": leaked}))
        # in the third of several arrays searched as one (the arrays' joins hold a NaN, which the
        # running sums of the order-free search step over)
        with pytest.raises(PrivacyViolation, match="array 'c' contains row"):
            audit.check("c", Message("fit", {"a": params[:5000], "b": params[5000:9000], "c": leaked[500:2000]}))


def test_rare_rows_of_small_counts_and_outlier_runs_are_not_found_in_index_lists():
    """Credit-like counts: a borrower with (0, 0, 1, 1, 2, 2, 3) late payments, dependents, loans
    is rare among borrowers, but those numbers in any order are in every list of child indices;
    and a run of one whole-dollar DebtRatio among ratios standardises to one outlier and five
    near-equal values, a shape of any list of one large and five close numbers. Neither flags a
    circuit's config any more; the same row with a ratio in it, and a real run of ratios
    (scaled), still do."""
    import pandas as pd
    from fedpgm.data.partition import ClientData
    from fedpgm.data.schema import Feature, Schema
    rng = np.random.default_rng(5)
    n = 20_000
    counts = np.where(rng.random((n, 7)) < 0.4, 0.0, rng.integers(1, 9, (n, 7)).astype(float))
    counts[17] = [0, 0, 1, 1, 2, 2, 3]
    ratio = np.round(rng.uniform(0, 1, n), 6)
    ratio[40] = 3000.0  # a whole-dollar amount where income is missing
    ratio[41:46] = [0.00012, 0.00019, 0.00031, 0.00038, 0.00012]
    held = Schema(tuple(Feature(f"c{i}", "continuous") for i in range(7)))
    schema = Schema((*held.features, Feature("ratio", "continuous")))
    audit = PrivacyAudit([ClientData("counts", held, pd.DataFrame(counts, columns=held.names)),
                          ClientData("c", schema, pd.DataFrame(np.c_[counts, ratio], columns=schema.names))])
    from fedpgm.federation.privacy import row_bits
    assert row_bits(counts)[17] >= 16  # rare among the rows: the old rule searched for it
    children = [3, 2, 0, 1, 2, 0, 1]  # a sum's children, in any order
    outlier = [51.0, 0.0001, 0.0002, 0.0003, 0.0004, 0.0001]  # one large number, five close ones
    config = {"nodes": [{"children": children}, {"counts": outlier}]}
    audit.check("counts", Message("fit", config=config))
    audit.check("c", Message("fit", config=config))
    with pytest.raises(PrivacyViolation, match="row 17"):
        audit.check("c", Message("fit", config={"row": [ratio[17], *counts[17][::-1]]}))
    with pytest.raises(PrivacyViolation, match="consecutive values of column 'ratio'"):
        audit.check("c", Message("fit", {"w": ratio[100:110] * 7 - 2}))


@pytest.fixture(scope="module")
def sorted_by_price():
    """A table like R's diamonds, whose rows are sorted by price: in row order, price climbs by a
    few dollars (runs such as 6078..6083) and carat repeats two values at a time; depth is in no
    order. Honest default FedPC runs on it were refused (issue 50)."""
    import pandas as pd
    from fedpgm.data.partition import ClientData
    from fedpgm.data.schema import Feature, Schema
    rng = np.random.default_rng(7)
    n = 20_000
    price = np.sort(np.round(np.exp(rng.uniform(np.log(326), np.log(18823), n))))
    carat = np.round(0.2 + price / 6000 + rng.normal(0, 0.004, n), 2)
    depth = np.round(rng.normal(61.7, 1.4, n), 1)
    schema = Schema((Feature("price", "continuous"), Feature("carat", "continuous"), Feature("depth", "continuous")))
    client = ClientData("c", schema, pd.DataFrame({"price": price, "carat": carat, "depth": depth}))
    return client, PrivacyAudit([client])


def test_progressions_probabilities_and_cluster_ids_are_not_copies_of_a_sorted_column(sorted_by_price):
    """What diamonds' clients were refused for: a product's child indices 4..9 (an arithmetic
    progression, as prices 6078..6083 are up to a shift), a leaf's probabilities (counts over n,
    the shape of 5294, 5294, 5296, 5296, 5297, 5299), each row's cluster id (a carat run of two
    values). The same audit still finds a run of depth, scaled and shifted, and says which
    setting to change."""
    client, audit = sorted_by_price
    rng = np.random.default_rng(0)
    probs = {"a": [0.0078125, 0.0078125, 0.1640625, 0.1640625, 0.2421875, 0.3984375],
             "b": [0.398876, 0.286517, 0.117978, 0.061798, 0.005618, 0.005618]}
    arrays = {f"leaf{k}.categorical.probs": np.array(v) for k, v in probs.items()}
    arrays["memberships/cluster"] = rng.integers(0, 4, 5000)  # (holds 3, 2, 1, 0, 0, 0: a refused run)
    arrays["codes"] = np.repeat(np.arange(40), rng.integers(1, 4, 40))  # sorted integer codes
    config = {"nodes": [{"type": "product", "children": list(range(4, 10))}, {"children": list(range(200))}]}
    audit.check("c", Message("fit", arrays, config))
    depth = client.train["depth"].to_numpy()
    with pytest.raises(PrivacyViolation, match="values of column 'depth'.*set audit to false in the client's policy"):
        audit.check("c", Message("fit", {**arrays, "w": depth[300:330] * 10 + 3}))
    price = client.train["price"].to_numpy()
    from fedpgm.federation.privacy import shape_bits
    assert shape_bits(price[None, 6000:6006]) < 48 <= shape_bits(depth[None, 6000:6012])


# -- the last audit refusals of honest default runs on the corpus of issue 50 -----------------

def one_column(name: str, values: np.ndarray):
    import pandas as pd
    from fedpgm.data.partition import ClientData
    from fedpgm.data.schema import Feature, Schema
    return ClientData("c", Schema((Feature(name, "continuous"),)), pd.DataFrame({name: values}))


def test_a_column_stored_through_float32_is_read_at_its_decimals():
    """InstInnovation's employment, thousands to 3 decimals, went through float32 (0.1230000149,
    0.1240000102, ...): read to 16 digits, its sorted run 0.123..0.128 carried 109 bits and was
    found, up to scale and shift, in a fit's child indices 1..17 (refused, every split). Its runs
    (scaled) and exact sorted copies are still caught."""
    rng = np.random.default_rng(6)
    thousands = np.round(rng.lognormal(0, 2, 1666), 3)
    employment = (thousands.astype(np.float32) * np.float32(1000)).astype(np.float64) / 1000  # off by ~2^-23
    client = one_column("employment", employment)
    audit = PrivacyAudit([client])
    audit.check("c", Message("fit", config={"nodes": [{"type": "product", "children": list(range(1, 18))}]}))
    with pytest.raises(PrivacyViolation, match="consecutive values of column 'employment'"):
        audit.check("c", Message("fit", {"w": employment[100:110] * 7 - 2}))
    with pytest.raises(PrivacyViolation, match="consecutive sorted values of column 'employment' of"):
        audit.check("c", Message("fit", {"w": np.unique(employment)[600:640]}))


def test_a_row_of_small_numbers_is_not_found_in_a_circuits_child_indices():
    """acs12's row (60 hours, age 51, 1 minute to work, unmarried, birth quarter 2) is rare among
    its rows, and its values in any order are in a circuit's config as a sum's last children and
    the next leaves' variables: 51, 60, 0, 1, 2 (refused, vertical x3). A match by chance somewhere
    in a message of 100 numbers is likely; the row alone in a message is still caught."""
    import pandas as pd
    from fedpgm.data.partition import ClientData
    from fedpgm.data.schema import Feature, Schema
    rng = np.random.default_rng(8)
    n = 800
    table = pd.DataFrame({"hrs_work": np.clip(np.round(rng.normal(40, 12, n)), 1, 99),
                          "age": rng.integers(16, 95, n).astype(float),
                          "time_to_work": np.clip(np.round(rng.lognormal(3, 0.8, n)), 1, 150),
                          "married": rng.integers(0, 2, n).astype(float),
                          "birth_qrtr": rng.integers(0, 4, n).astype(float)})
    table.iloc[17] = [60, 51, 1, 0, 2]
    schema = Schema((Feature("hrs_work", "continuous"), Feature("age", "continuous"),
                     Feature("time_to_work", "continuous"), Feature("married", "binary", ("no", "yes")),
                     Feature("birth_qrtr", "categorical", ("q2", "q1", "q3", "q4"))), label="birth_qrtr")
    audit = PrivacyAudit([ClientData("c", schema, table)])
    nodes = []
    for first in range(0, 64, 4):  # three leaves (variables 0, 1, 2) and their product
        nodes += [{"type": "leaf", "var": v} for v in range(3)]
        nodes.append({"type": "product", "children": [first, first + 1, first + 2]})
    nodes.insert(52, {"type": "sum", "children": [3, 7, 11, 19, 23, 51, 60]})
    audit.check("c", Message("fit", config={"n": 1600, "nodes": nodes}))
    with pytest.raises(PrivacyViolation, match="row 17"):
        audit.check("c", Message("fit", config={"row": [51, 60, 0, 1, 2]}))


def test_ids_within_the_matching_tolerance_of_each_other_are_one_value():
    """cms_patient_experience's org_pac_id repeats each organisation's id over its rows; the run
    1557267069, 1759293111 (x 5), 1759293954 (x 4), whose last two ids are closer than the affine
    tolerance, is a leaf's probabilities 0.98, 0.0039 (x 9) up to scale and shift (refused,
    vertical x3). A run over three ids that are not is still caught."""
    rng = np.random.default_rng(9)
    orgs = np.unique(rng.integers(10**8, 9 * 10**9, 84)).astype(float)
    close = [1557267069.0, 1759293111.0, 1759293954.0]
    orgs = np.sort(np.r_[orgs[(orgs < close[0]) | (orgs > close[2])], close])
    rows = np.full(len(orgs), 6)
    rows[np.searchsorted(orgs, close[1])] = 5
    ids = np.repeat(orgs, rows)
    audit = PrivacyAudit([one_column("org_pac_id", ids)])
    probs = [0.00390625, 0.98046875, *[0.00390625] * 9, 0.98046875, *[0.0048543689320388345] * 4]
    audit.check("c", Message("fit", {"cluster0/leaf.categorical.probs": np.array(probs)}))
    with pytest.raises(PrivacyViolation, match="consecutive values of column 'org_pac_id'"):
        audit.check("c", Message("fit", {"w": ids[100:112] / 1e9}))
