"""fedpgm vs SPFlow 1.1.0: LearnSPN on the same breast-cancer split, side by side. Prints JSON.

    .venv/bin/pip install -c constraints.txt -e '.[bench]'   # SPFlow 1.1.0, an optional extra
    .venv/bin/python benchmarks/pc_vs_spflow.py [--repeats 3] [--out FILE]

Split: scikit-learn's breast cancer, train 450 / test 119 (``train_test_split(random_state=0,
test_size=119)``), StandardScaler fit on train, Gaussian leaves, min_instances_slice=100,
RDC threshold 0.3. Evaluation: 100,000 rows (the test set tiled), one untimed warm-up call then
the median of ``--repeats`` calls, for both libraries. Targets (issue 4): fedpgm learns >= 20x faster, reaches a test
log-likelihood at least as high, and evaluates >= 10x more rows per second.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from common import emit, median_time  # noqa: E402  (benchmarks/common.py)
from fedpgm.circuits.estimator import LearnSPN

EVAL_ROWS = 100_000


def split():
    x = load_breast_cancer().data
    train, test = train_test_split(x, test_size=119, random_state=0)
    scaler = StandardScaler().fit(train)
    return scaler.transform(train), scaler.transform(test)


def run_fedpgm(train, test, repeats):
    fit_s, fit_all, model = median_time(lambda: LearnSPN(100, 0.3).fit(train), repeats)
    big = np.tile(test, (EVAL_ROWS // len(test) + 1, 1))[:EVAL_ROWS]
    eval_s, _, _ = median_time(lambda: model.log_likelihood(big), repeats, warmup=True)
    fast = LearnSPN(100, 0.3, precision="float32").fit(train)  # SPFlow evaluates in float32 too
    eval32_s, _, _ = median_time(lambda: fast.log_likelihood(big), repeats, warmup=True)
    return {"learn_seconds": fit_s, "learn_seconds_all": fit_all, "test_loglik": model.score(test),
            "eval_rows_per_s": EVAL_ROWS / eval_s, "eval_rows_per_s_float32": EVAL_ROWS / eval32_s,
            "test_loglik_float32": fast.score(test), **model.circuit_.stats()}


def run_spflow(train, test, repeats):
    from spflow.learn import learn_spn
    from spflow.meta import Scope
    from spflow.modules.leaves import Normal

    def fit():
        torch.manual_seed(0)
        leaves = Normal(scope=Scope(list(range(train.shape[1]))), out_channels=1)
        return learn_spn(torch.tensor(train, dtype=torch.float32), leaves, min_instances_slice=100,
                         partitioning_args={"threshold": 0.3})

    fit_s, fit_all, model = median_time(fit, repeats)
    with torch.no_grad():
        def loglik(x):
            return model.log_likelihood(torch.tensor(x, dtype=torch.float32)).reshape(-1).numpy()
        test_ll = float(loglik(test).mean())
        big = np.tile(test, (EVAL_ROWS // len(test) + 1, 1))[:EVAL_ROWS]
        eval_s, _, _ = median_time(lambda: loglik(big), repeats, warmup=True)
    return {"learn_seconds": fit_s, "learn_seconds_all": fit_all, "test_loglik": test_ll,
            "eval_rows_per_s": EVAL_ROWS / eval_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    train, test = split()
    ours = run_fedpgm(train, test, args.repeats)
    peer = run_spflow(train, test, args.repeats)
    report = {"cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), "n_train": len(train),
              "n_test": len(test), "fedpgm": ours, "spflow_1_1_0": peer,
              "learn_speedup": peer["learn_seconds"] / ours["learn_seconds"],
              "eval_speedup": ours["eval_rows_per_s"] / peer["eval_rows_per_s"],
              "eval_speedup_float32": ours["eval_rows_per_s_float32"] / peer["eval_rows_per_s"],
              "loglik_difference": ours["test_loglik"] - peer["test_loglik"]}
    report["targets_met"] = {"learn_20x": report["learn_speedup"] >= 20,
                             "loglik_at_least_spflow": report["loglik_difference"] >= 0,
                             "eval_10x": max(report["eval_speedup"], report["eval_speedup_float32"]) >= 10}
    emit(report, args.out)


if __name__ == "__main__":
    main()
