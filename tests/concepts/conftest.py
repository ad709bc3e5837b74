"""A user's concept-annotated table (a CSV and a client manifest) for the F-CM tests."""

import numpy as np
import pytest


@pytest.fixture
def cancer_table(tmp_path):
    """scikit-learn's breast cancer as a concept-annotated CSV: the ten mean_* measurements are the
    inputs, five concepts are worst_* measurements above their median (yes/no), the task is the
    diagnosis; and a manifest of four clients (the late two bring the concept 'irregular')."""
    import json

    from sklearn.datasets import load_breast_cancer

    bc = load_breast_cancer(as_frame=True).frame
    table = bc[[c for c in bc.columns if c.startswith("mean ")]].rename(columns=lambda c: c.replace(" ", "_"))
    for name, column in {"large": "worst radius", "rough": "worst texture", "concave": "worst concave points",
                         "irregular": "worst symmetry", "dense": "worst compactness"}.items():
        table[name] = np.where(bc[column] > bc[column].median(), "yes", "no")
    table["diagnosis"] = np.where(bc["target"] == 0, "malignant", "benign")
    table.loc[[5, 50], "mean_texture"] = np.nan  # a missing input: at the mean
    table.loc[7, "rough"] = np.nan  # a missing concept: the row is left out
    table.to_csv(tmp_path / "cancer.csv", index=False)
    manifest = {"hospital-a": ["large", "concave"], "hospital-b": ["large", "rough", "dense"],
                "hospital-c": ["concave", "irregular"], "hospital-d": ["rough", "irregular", "dense", "large"]}
    (tmp_path / "clients.json").write_text(json.dumps(manifest))
    return tmp_path / "cancer.csv", tmp_path / "clients.json"

