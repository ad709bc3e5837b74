"""Dense circuits on images against libcirkit 0.3.1, same run, interleaved. Prints JSON.

    .venv/bin/python benchmarks/pc_images_peer.py [--dataset mnist5k] [--units 10] [--epochs 5]
        [--seeds 0,1,2] [--threads 2] [--device cpu|cuda] [--out FILE]

Both sides build the same Poon-Domingos region graph (cirkit's ``image_data(..., "poon-domingos")``
cuts cells of ceil(side / 8) pixels, so fedpgm uses ``cell`` = that size), K units per region
and per input, categorical inputs over the 256 pixel values (exact masses, so bits per
dimension need no discretisation), Tucker (EiNet) product-sum layers, and Adam with the same
learning rate, batch size, epochs and row order. Reported per seed and as medians: training
rows/s, test bits per dimension, parameters; fedpgm's ratio to cirkit. fedpgm's own default
(Gaussian inputs, EiNet's online EM, the paper's 8 pieces) is run beside, labelled as such.
``--pyjuice`` (CUDA only; PyJuice compiles no circuit without it) adds PyJuice's PD with the
same cells, K and categorical inputs, trained by mini-batch EM, against fedpgm's online EM with
one batch per update and the same step size.

libcirkit pins scipy~=1.14, which conflicts with this project's scipy; install it without its
dependencies (``scripts/install_peers.sh`` does): ``pip install --no-deps libcirkit==0.3.1`` beside
the bench extra (opt_einsum, einops, graphviz). PyJuice 2.6.3 was installed the same way on the
GPU machine (its numba, triton and tqdm were there).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import torch

from common import emit  # noqa: E402  (benchmarks/common.py)
from fedpgm.circuits.dense_estimator import DensePC
from fedpgm.data import load_dataset
from fedpgm.data.images import bits_per_dim, layout


def batches(n: int, size: int, seed: int, epoch: int) -> list[np.ndarray]:
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return [order[i:i + size] for i in range(0, n, size)]


def run_cirkit(train: np.ndarray, test: np.ndarray, shape, args, seed: int) -> dict:
    from cirkit.pipeline import PipelineContext
    from cirkit.templates import data_modalities

    torch.manual_seed(seed)
    circuit = data_modalities.image_data((1, *shape), region_graph="poon-domingos", input_layer="categorical",
                                         num_input_units=args.units, sum_product_layer="tucker",
                                         num_sum_units=args.units)
    ctx = PipelineContext(backend="torch", semiring="lse-sum", fold=True, optimize=True)
    model = ctx.compile(circuit).to(args.device)
    x = torch.as_tensor(train, dtype=torch.long, device=args.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, fused=True)  # as fedpgm: the one-pass kernel
    start = time.perf_counter()
    for epoch in range(args.epochs):
        for rows in batches(len(x), args.batch_size, seed, epoch):
            loss = -model(x[rows]).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    sync(args.device)
    seconds = time.perf_counter() - start
    return {"train_seconds": seconds, "rows_per_s": args.epochs * len(x) / seconds,
            "test_bpd": peer_bpd(model, test, args.device), "n_params": sum(p.numel() for p in model.parameters())}


def peer_bpd(model, test: np.ndarray, device: str) -> float:
    """Test bits per dimension of a peer's compiled circuit (log-likelihoods in batches of 500)."""
    with torch.no_grad():
        t = torch.as_tensor(test, dtype=torch.long, device=device)
        ll = torch.cat([model(t[i:i + 500]).reshape(-1) for i in range(0, len(t), 500)]).double().cpu().numpy()
    return bits_per_dim(ll, test.shape[1])


def run_pyjuice(train: np.ndarray, test: np.ndarray, shape, args, seed: int, cell: int) -> dict:
    """PyJuice (CUDA only): the same PD cells and K, categorical inputs, mini-batch EM with
    fedpgm's online-EM step per batch (``--em-step``), same batches and epochs."""
    import pyjuice as juice

    torch.manual_seed(seed)
    ns = juice.structures.PD(data_shape=shape, num_latents=args.units, split_intervals=(cell, cell),
                             structure_type="sum_dominated", input_node_params={"num_cats": 256})
    pc = juice.compile(ns).to(args.device)
    x = torch.as_tensor(train, dtype=torch.long, device=args.device)
    start = time.perf_counter()
    for epoch in range(args.epochs):
        pc.init_param_flows(flows_memory=0.0)
        for rows in batches(len(x), args.batch_size, seed, epoch):
            pc(x[rows])
            pc.backward(x[rows], flows_memory=0.0)
            pc.mini_batch_em(step_size=args.em_step, pseudocount=1e-2)
    sync(args.device)
    seconds = time.perf_counter() - start
    return {"train_seconds": seconds, "rows_per_s": args.epochs * len(x) / seconds,
            "test_bpd": peer_bpd(pc, test, args.device), "n_params": int(pc.num_parameters())
            if hasattr(pc, "num_parameters") else -1}


def run_fedpgm(train_frame, test_frame, schema, params: dict, args, seed: int) -> dict:
    model = DensePC(**params, device=args.device, seed=seed)
    model.fit(train_frame, schema)
    sync(args.device)
    return {"train_seconds": model.train_seconds_, "rows_per_s": model.epochs * len(train_frame) / model.train_seconds_,
            "test_bpd": model.bits_per_dim(test_frame), "n_params": model.n_params}


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def medians(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="mnist5k")
    ap.add_argument("--rows", type=int, default=None, help="first N training rows (default: all)")
    ap.add_argument("--units", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--skip-default", action="store_true", help="leave out fedpgm's default (Gaussian, online EM)")
    ap.add_argument("--pyjuice", action="store_true", help="also PyJuice (CUDA), EM on both sides")
    ap.add_argument("--em-step", type=float, default=0.1, help="--pyjuice: EM step per mini-batch")
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ds = load_dataset(args.dataset).drop_label()
    train_frame = ds.train if args.rows is None else ds.train.iloc[:args.rows]
    (h, w), order = layout(ds.schema)
    train = train_frame.to_numpy()[:, order]
    test = ds.test.to_numpy()[:, order]
    cell = float(max(math.ceil(h / 8), math.ceil(w / 8)))  # cirkit's PD delta
    same = {"structure": "pd", "cell": cell, "units": args.units, "leaf": "categorical", "method": "adam",
            "lr": args.lr, "epochs": args.epochs, "batch_size": args.batch_size}
    default = {"units": args.units, "epochs": args.epochs, "batch_size": args.batch_size}
    em = {**same, "method": "online", "frequency": 1, "step": args.em_step}
    runs = {"fedpgm": [], "cirkit": [], "fedpgm_default": [], "fedpgm_em": [], "pyjuice": []}
    for seed in [int(s) for s in args.seeds.split(",")]:  # interleaved: ours, the peer, ours (default)
        runs["fedpgm"].append(run_fedpgm(train_frame, ds.test, ds.schema, same, args, seed))
        runs["cirkit"].append(run_cirkit(train, test, (h, w), args, seed))
        if not args.skip_default:
            runs["fedpgm_default"].append(run_fedpgm(train_frame, ds.test, ds.schema, default, args, seed))
        if args.pyjuice:
            runs["fedpgm_em"].append(run_fedpgm(train_frame, ds.test, ds.schema, em, args, seed))
            runs["pyjuice"].append(run_pyjuice(train, test, (h, w), args, seed, int(cell)))
    report = {"dataset": ds.name, "n_train": len(train), "n_test": len(test), "device": args.device,
              "torch_threads": torch.get_num_threads(), "settings": same,
              "fedpgm_default_settings": {**default, "structure": "pd", "pieces": 8, "leaf": "gaussian",
                                          "method": "online"},
              "runs": {k: v for k, v in runs.items() if v}, "median": {k: medians(v) for k, v in runs.items() if v}}
    m = report["median"]
    report["fedpgm_over_cirkit"] = {"rows_per_s": m["fedpgm"]["rows_per_s"] / m["cirkit"]["rows_per_s"],
                                    "test_bpd_difference": m["fedpgm"]["test_bpd"] - m["cirkit"]["test_bpd"]}
    if args.pyjuice:
        report["fedpgm_em_settings"] = em
        report["fedpgm_em_over_pyjuice"] = {
            "rows_per_s": m["fedpgm_em"]["rows_per_s"] / m["pyjuice"]["rows_per_s"],
            "test_bpd_difference": m["fedpgm_em"]["test_bpd"] - m["pyjuice"]["test_bpd"]}
    emit(report, args.out)


if __name__ == "__main__":
    main()
