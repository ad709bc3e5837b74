import re

import numpy as np
import pytest
from pgmpy.inference import VariableElimination

from fedpgm.concepts.data import bayes_task_accuracy, make_concept_data
from fedpgm.data.bayesnet import read_network


def test_bayes_ceiling_equals_exact_inference_given_every_concept():
    data = make_concept_data("asia", rows=1500, seed=1)
    rows = data.part(2)
    infer = VariableElimination(read_network("asia"))
    hits = 0
    for r in rows:
        evidence = {n: data.states[n][data.codes[r, i]] for i, n in enumerate(data.nodes) if n != data.task}
        posterior = infer.query([data.task], evidence=evidence, show_progress=False)
        best = posterior.state_names[data.task][int(np.argmax(posterior.values))]
        hits += best == data.states[data.task][data.codes[r, -1]]
    ceiling = bayes_task_accuracy(data)
    print(f"asia Bayes-optimal task accuracy given all concepts: {ceiling:.4f} on {len(rows)} rows")
    assert ceiling == hits / len(rows)
    majority = np.bincount(data.codes[rows, -1]).max() / len(rows)
    assert ceiling > majority + 0.2  # dysp given its Markov blanket: far above the majority class


def test_a_users_table_as_concept_data(cancer_table, capsys):
    from fedpgm.concepts.data import read_manifest, table_concept_data
    from fedpgm.data import load_dataset

    csv, manifest = cancer_table
    ds = load_dataset(f"csv:{csv}", label="diagnosis")
    d = table_concept_data(ds, "diagnosis", read_manifest(manifest), seed=3)
    assert "1 row(s) miss a concept or the task" in capsys.readouterr().err
    assert d.nodes == ["large", "concave", "rough", "dense", "irregular", "diagnosis"] and d.task == "diagnosis"
    assert d.codes.shape == (568, 6) and d.x.shape == (568, 10) and np.isfinite(d.x).all()
    assert np.allclose(d.x.mean(0), 0, atol=0.01) and d.states["diagnosis"] in (("benign", "malignant"),
                                                                               ("malignant", "benign"))
    assert 0.6 < (d.split == 0).mean() < 0.8 and d.dataset == "csv:cancer.csv"
    # the reference DAG (learned on the training rows): the task a sink with concept parents
    assert d.dag.out_degree("diagnosis") == 0 and d.dag.in_degree("diagnosis") >= 1
    inputs = table_concept_data(ds, "diagnosis", read_manifest(manifest), ["mean_radius", "mean_area"])
    assert inputs.x.shape[1] == 2


@pytest.mark.parametrize("manifest, inputs, message", [
    ('{"a": ["large"]}', None, "at least 2"),
    ('{"a": ["large"], "b": []}', None, "client 'b' observes no concept"),
    ('{"a": ["large"], "b": ["nope"]}', None, "['nope'] are not in"),
    ('{"a": ["large"], "b": ["diagnosis"]}', None, "task 'diagnosis' is listed as a client's concept"),
    ('{"a": ["large"], "b": ["mean_area"]}', None, "'mean_area' is numeric"),
    ('{"a": ["large"], "b": ["rough"]}', ["mean_area", "rough"], "--inputs names the concept"),
    ('["large"]', None, "must map each client to a list"),
    ('{"a b": ["large"], "c": ["rough"]}', None, "client name 'a b'"),
    ("{oops", None, "is not JSON"),
])
def test_bad_manifests_and_columns_fail_with_the_fix(cancer_table, tmp_path, manifest, inputs, message):
    from fedpgm.concepts.data import read_manifest, table_concept_data
    from fedpgm.data import load_dataset
    from fedpgm.errors import FedpgmError

    csv, _ = cancer_table
    (tmp_path / "m.json").write_text(manifest)
    with pytest.raises(FedpgmError, match=re.escape(message)):
        table_concept_data(load_dataset(f"csv:{csv}", label="diagnosis"), "diagnosis",
                           read_manifest(tmp_path / "m.json"), inputs)
