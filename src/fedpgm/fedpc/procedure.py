"""A FedPC or FC[DT] fit on any backend: the server's side (``server_procedure``, registered in
``fedpgm.federation.apps``) and the call that runs it (``fit_on``), shared by the estimator
(``FederatedPC``) and the experiment (``run_fedpc``, ``run_fcdt``)."""

from __future__ import annotations

import time
from typing import Any, TypeVar

import numpy as np

from fedpgm.data.dataset import Dataset
from fedpgm.data.partition import Partition
from fedpgm.federation.lifecycle import private_tempdir
from fedpgm.federation.runner import run
from fedpgm.fedpc.model import FedPC
from fedpgm.fedpc.server import fit_fedpc
from fedpgm.fedpc.trees import TreeCircuit, fit_fcdt

M = TypeVar("M", FedPC, TreeCircuit)


def server_procedure(fed, fit: dict, test: str | None, columns: list[str], target: str | None = None,
                     out: str | None = None, method: str = "fedpc") -> dict:
    """The server's side on every backend (``fedpgm.federation.runner``): fit (FedPC, or FC[DT]
    with ``method`` "fcdt"), save to ``out``, evaluate the test rows in ``test`` (npz with ``X``,
    one column per name in ``columns``; None: no evaluation). ``finish_seconds``: saving and
    evaluating, which a run's wall time leaves out."""
    import pandas as pd

    model = fit_fcdt(fed, **fit) if method == "fcdt" else fit_fedpc(fed, **fit)
    t0 = time.perf_counter()
    result: dict[str, Any] = {"info": model.info}
    if out is not None:
        model.save(out)
    if test is not None:
        with np.load(test, allow_pickle=False) as z:
            X = pd.DataFrame(z["X"], columns=columns)
        if model.density:  # (FC[DT] is a classifier)
            result["test_ll"] = model.log_likelihood(X).tolist()
        if target is not None:
            result["proba"] = model.predict_proba(X, target).tolist()
    result["finish_seconds"] = time.perf_counter() - t0
    return result


def fit_on(part: Partition, fit: dict, backend: str, timeout: float, model: type[M],
           ds: Dataset | None = None, mode: str = "processes") -> tuple[dict, M]:
    """``server_procedure`` fitting a ``model`` (``FedPC`` or FC[DT]'s ``TreeCircuit``) with ``fit``
    (``fit_fedpc``'s or ``fit_fcdt``'s arguments) on
    ``backend`` (``fedpgm.federation.runner``): (its result, with ``test_ll`` (FedPC) and
    ``proba`` on ``ds.test`` where ``ds`` is given; the model read back from its files; its
    ``finish_seconds``: evaluating, saving and reading the model back, which a run's wall time
    leaves out). ``timeout``: seconds per exchange; ``mode``: the in-process federation's."""
    with private_tempdir("fedpgm-fedpc-") as tmp:
        args: dict[str, Any] = {"fit": fit, "test": None, "columns": [], "target": None,
                                "out": str(tmp / "model"), "method": model.method}
        if ds is not None:
            np.savez(tmp / "test.npz", X=ds.test[ds.schema.names].to_numpy(dtype=float))
            args.update(test=str(tmp / "test.npz"), columns=ds.schema.names, target=ds.schema.label)
        result = run(part, "fedpc", "fedpc", args, backend=backend, timeout=timeout, mode=mode)
        t0 = time.perf_counter()
        fitted = model.load(tmp / "model")
        result["finish_seconds"] += time.perf_counter() - t0
    return result, fitted
