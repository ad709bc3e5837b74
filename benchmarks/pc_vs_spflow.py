"""fedpgm vs SPFlow 1.1.0: LearnSPN on the same data, the two timed in turn. Prints JSON.

    .venv/bin/pip install -c constraints.txt -e '.[bench]'   # SPFlow 1.1.0, an optional extra
    .venv/bin/python benchmarks/pc_vs_spflow.py [--data breast_cancer,blobs] [--repeats 5] [--out FILE]

Data: scikit-learn's breast cancer (train 450 / test 119, ``train_test_split(random_state=0,
test_size=119)``, min_instances_slice 100) and 50,000 x 20 Gaussian blobs (``make_blobs``, 8
centres, seed 0; 10,000 more rows to test; min_instances_slice 500); both standardised on
train, Gaussian leaves, RDC threshold 0.3. Timing (``common.interleaved``): the libraries'
fits alternate (ours, SPFlow, ours, ...), as do their evaluations, so a load change on the
shared machine hits both alike; medians of ``--repeats``. Evaluation: 100,000 rows (the test
rows tiled), one untimed warm-up call each, fedpgm in float64 and in float32 reported apart
(SPFlow evaluates in float32), at the process's default thread count. Targets (issue 27):
learning >= 20x faster than SPFlow on both sets, a test log-likelihood at least SPFlow's, and
float64 evaluation >= 10x SPFlow's rows/s.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os

import numpy as np
import torch
from sklearn.datasets import load_breast_cancer, make_blobs
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from common import emit, interleaved  # noqa: E402  (benchmarks/common.py)
from fedpgm.circuits.estimator import LearnSPN

EVAL_ROWS = 100_000
THRESHOLD = 0.3


def standardised(train, test):
    scaler = StandardScaler().fit(train)
    return scaler.transform(train), scaler.transform(test)


def breast_cancer():
    """(train, test, min_instances_slice)."""
    train, test = train_test_split(load_breast_cancer().data, test_size=119, random_state=0)
    return *standardised(train, test), 100


def blobs():
    x, _ = make_blobs(n_samples=60_000, n_features=20, centers=8, random_state=0)
    return *standardised(x[:50_000], x[50_000:]), 500


DATA = {"breast_cancer": breast_cancer, "blobs": blobs}


def spflow_fit(train, min_instances, threshold=THRESHOLD):
    """SPFlow's LearnSPN with Gaussian leaves on every column (k-means row splits, RDC variable
    splits); its k-means prints a line per split, kept off stdout (which carries the JSON)."""
    from spflow.learn import learn_spn
    from spflow.meta import Scope
    from spflow.modules.leaves import Normal

    torch.manual_seed(0)
    leaves = Normal(scope=Scope(list(range(train.shape[1]))), out_channels=1)
    with contextlib.redirect_stdout(io.StringIO()):
        return learn_spn(torch.tensor(train, dtype=torch.float32), leaves, min_instances_slice=min_instances,
                         partitioning_args={"threshold": threshold})


def spflow_loglik(model, x):
    with torch.no_grad():
        return model.log_likelihood(torch.tensor(x, dtype=torch.float32)).reshape(-1).numpy()


def compare(name: str, repeats: int) -> dict:
    train, test, min_instances = DATA[name]()
    fits = interleaved({"fedpgm": lambda: LearnSPN(min_instances, THRESHOLD).fit(train),
                        "spflow": lambda: spflow_fit(train, min_instances)}, repeats)
    ours, peer = fits["fedpgm"]["result"], fits["spflow"]["result"]
    fast = LearnSPN(min_instances, THRESHOLD, precision="float32").fit(train)
    big = np.tile(test, (EVAL_ROWS // len(test) + 1, 1))[:EVAL_ROWS]
    evals = interleaved({"float64": lambda: ours.log_likelihood(big), "float32": lambda: fast.log_likelihood(big),
                         "spflow": lambda: spflow_loglik(peer, big)}, repeats, warmup=True)
    rate = {k: EVAL_ROWS / v["median"] for k, v in evals.items()}
    report = {
        "n_train": len(train), "n_test": len(test), "min_instances_slice": min_instances,
        "fedpgm": {"learn_seconds": fits["fedpgm"]["median"], "learn_seconds_all": fits["fedpgm"]["runs"],
                   "test_loglik": ours.score(test), "test_loglik_float32": fast.score(test),
                   "eval_rows_per_s": rate["float64"], "eval_rows_per_s_float32": rate["float32"],
                   **ours.circuit_.stats()},
        "spflow_1_1_0": {"learn_seconds": fits["spflow"]["median"], "learn_seconds_all": fits["spflow"]["runs"],
                         "test_loglik": float(spflow_loglik(peer, test).mean()), "eval_rows_per_s": rate["spflow"]},
        "learn_speedup": fits["spflow"]["median"] / fits["fedpgm"]["median"],
        "eval_speedup_float64": rate["float64"] / rate["spflow"],
        "eval_speedup_float32": rate["float32"] / rate["spflow"]}
    report["loglik_difference"] = report["fedpgm"]["test_loglik"] - report["spflow_1_1_0"]["test_loglik"]
    report["targets_met"] = {"learn_20x": report["learn_speedup"] >= 20,
                             "loglik_at_least_spflow": report["loglik_difference"] >= 0,
                             "eval_float64_10x": report["eval_speedup_float64"] >= 10}
    print(name, {k: report[k] for k in ("learn_speedup", "eval_speedup_float64", "eval_speedup_float32")},
          flush=True)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=",".join(DATA))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    report = {"cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), "repeats": args.repeats,
              "data": {name: compare(name, args.repeats) for name in args.data.split(",")}}
    emit(report, args.out)


if __name__ == "__main__":
    main()
