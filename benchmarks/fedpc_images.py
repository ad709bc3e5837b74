"""FedPC on images: the paper's Table 1 MNIST row and Table 2 / Fig. 3 on this machine. Prints JSON.

    .venv/bin/python benchmarks/fedpc_images.py table1 [--dataset mnist5k] [--seeds 0,1,2] [--out F]
    .venv/bin/python benchmarks/fedpc_images.py table2 [--clients 1,2,4,8,16] [--seeds 0,1,2] [--out F]

Settings (``--protocol paper``, the default): the FedPC paper's Appendix E, Table 5 for MNIST
(Poon-Domingos, 8 pieces, K = 10, Gaussian inputs with variance in [1e-3, 0.25], online EM with
frequency 5 and step 0.1, batch 64, 5 epochs); pixel values scaled to [0, 1], bits per
dimension from the discretised Gaussians (Appendix E.2). ``--protocol project`` uses this
project's better settings instead, labelled as such: categorical inputs over the pixel values
trained with Adam (lr 0.05), which fit 8-bit digits far better (benchmarks/pc_images_peer.py).

table1: centralized PD circuit vs FedPC horizontal x5 (label skew, two classes per client), vertical
x2 (left | right halves) and hybrid x2 (halves overlapping by a band of 2 pixels, 20% common rows):
test log-likelihood (nats per image), bits per dimension, and relative runtime = the critical path
(the slowest client's CPU seconds plus the server's) over the centralized fit's CPU seconds, both
single-threaded (every in-process client runs under one thread; the centralized reference
under ``fedpgm.threads.one_thread``). Vertical and hybrid clients cut their region into cells of
the whole image's size (``cell``), so the clients' circuits together match the centralized one.

table2 (and Fig. 3): horizontal FedPC, rows spread at random, with 1 (centralized), 2, 4, 8, 16
clients, each client's circuit the centralized one's size (the federated model grows with the
clients, as the paper's Table 6): test bpd and critical-path seconds per client count; beside
it, a centralized circuit trained on 1/k of the rows (what one client can learn alone).
Medians over seeds; a PNG beside ``--out``.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from common import emit  # noqa: E402  (benchmarks/common.py)
from fedpgm.circuits.dense_estimator import DensePC
from fedpgm.data import load_dataset
from fedpgm.data.images import bits_per_dim, layout
from fedpgm.fedpc.experiment import FitSettings, centralized, run_fedpc
from fedpgm.threads import one_thread

PROTOCOLS = {"paper": {"structure": "pd", "pieces": 8, "units": 10, "leaf": "gaussian", "method": "online",
                       "frequency": 5, "step": 0.1, "batch_size": 64, "epochs": 5, "min_var": 1e-3,
                       "max_var": 0.25, "device": "cpu"},
             "project": {"structure": "pd", "pieces": 8, "units": 10, "leaf": "categorical", "method": "adam",
                         "lr": 0.05, "batch_size": 64, "epochs": 5, "device": "cpu"}}
SETTINGS = {"horizontal": ("horizontal", 5, {"scheme": "label-skew", "classes_per_client": 2}),
            "vertical": ("vertical", 2, {"regions": "halves"}),
            "hybrid": ("hybrid", 2, {"regions": "halves", "band": 2, "overlap": 0.2})}


def settings_for(split: str, clients: int, partition: dict, params: dict, seed: int) -> FitSettings:
    return FitSettings(split=split, clients=clients, learner="pd", params=params, seed=seed, partition=partition,
                       glue="combinatorial", centralized=False, timeout=7200.0)


def client_settings(params: dict, share: float, epochs: str | None, frequency: str | None) -> dict:
    """The clients' learner settings: the protocol's, with ``--client-epochs`` (a number, or
    "sqrt": the protocol's epochs / sqrt(share), rounded) and ``--client-frequency`` (a number,
    "auto": the protocol's frequency x share, or "sqrt": x sqrt(share), rounded, at least 1).
    ``share``: the client's share of the rows (horizontal clients 1/k, vertical ones all).
    "sqrt" for both makes as many EM updates as the centralized fit, each over sqrt(share) of
    its rows, in sqrt(share) of its time."""
    out = dict(params)
    if epochs is not None:
        out["epochs"] = round(params["epochs"] / math.sqrt(share)) if epochs == "sqrt" else int(epochs)
    if frequency is not None:
        scale = {"auto": share, "sqrt": math.sqrt(share)}.get(frequency)
        out["frequency"] = max(1, round(params["frequency"] * scale)) if scale is not None else int(frequency)
    return out


def one_run(ds, split: str, clients: int, partition: dict, params: dict, seed: int, central: dict,
            client: dict | None = None) -> dict:
    """The federated fit's figures beside the seed's centralized ones (fitted once per seed);
    ``client``: the clients' settings where they differ from the centralized fit's ``params``."""
    _, report = run_fedpc(ds, settings_for(split, clients, partition, client or params, seed))
    keys = ("test_loglik", "test_bpd", "critical_path_seconds", "train_seconds", "n_params")
    out = {k: report[k] for k in keys}
    out.update(central)
    out["relative_runtime"] = out["critical_path_seconds"] / central["centralized_train_seconds"]
    return out


def central_run(ds, params: dict, seed: int) -> dict:
    """The centralized PD circuit on all training rows, single-threaded (CPU seconds)."""
    pixels = ds.drop_label()
    model, seconds = centralized(pixels, settings_for("horizontal", 1, {}, params, seed))
    ll = model.log_likelihood(pixels.test)
    return {"centralized_test_loglik": float(ll.mean()), "centralized_test_bpd": bits_per_dim(ll, len(pixels.schema)),
            "centralized_train_seconds": seconds, "centralized_n_params": model.n_params}


def median(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0] if isinstance(runs[0][k], (int, float))}


def table1(args, params: dict) -> dict:
    ds = load_dataset(args.dataset)
    narrow = layout(ds.schema)[0][1] <= 8  # (digits: a band of 2 would leave each half 2 private columns)
    central = {seed: central_run(ds, params, seed) for seed in args.seeds}
    out = {}
    for name in args.settings.split(","):
        split, clients, part = SETTINGS[name]
        part = {**part, "band": 1} if narrow and "band" in part else part
        share = 1 / clients if split == "horizontal" else 1.0
        client = client_settings(params, share, args.client_epochs, args.client_frequency)
        runs = [one_run(ds, split, clients, part, params, seed, central[seed], client) for seed in args.seeds]
        out[name] = {"clients": clients, "partition": part, "runs": runs, "median": median(runs)}
        m = out[name]["median"]
        m["bpd_gap_percent"] = 100 * (m["test_bpd"] / m["centralized_test_bpd"] - 1)
    return out


def table2(args, params: dict) -> dict:
    ds = load_dataset(args.dataset)
    central = {seed: central_run(ds, params, seed) for seed in args.seeds}
    out = {}
    for k in args.clients:
        runs = []
        for seed in args.seeds:
            client = client_settings(params, 1 / k, args.client_epochs, args.client_frequency)
            run = one_run(ds, "horizontal", k, {"scheme": "iid"}, params, seed, central[seed], client)
            run["client_frequency"], run["client_epochs"] = client.get("frequency"), client["epochs"]
            if k > 1:  # what one client can learn alone: the same circuit on 1/k of the rows
                pixels = ds.drop_label()
                rows = pixels.train.sample(frac=1 / k, random_state=seed)
                with one_thread():
                    alone = DensePC(**{**client, "seed": seed}).fit(rows, pixels.schema)
                run["one_client_alone_test_bpd"] = bits_per_dim(alone.log_likelihood(pixels.test), len(pixels.schema))
            runs.append(run)
        out[str(k)] = {"runs": runs, "median": median(runs)}
    return out


def plot_table2(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = [int(k) for k in report["results"]]
    med = [report["results"][str(k)]["median"] for k in ks]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.plot(ks, [m["test_bpd"] for m in med], "-o", label="FedPC (k clients)")
    a.plot(ks[1:], [m["one_client_alone_test_bpd"] for m in med[1:]], "--s", label="one client alone (1/k rows)")
    a.set_xscale("log", base=2)
    a.set_xlabel("clients")
    a.set_ylabel("test bits per dimension")
    a.legend()
    a.grid(alpha=0.3)
    b.plot(ks, [m["critical_path_seconds"] for m in med], "-o")
    b.set_xscale("log", base=2)
    b.set_yscale("log")
    b.set_xlabel("clients")
    b.set_ylabel("critical-path training CPU seconds")
    b.grid(alpha=0.3)
    fig.suptitle(f"{report['dataset']}, horizontal FedPC, {report['protocol']} settings (medians of "
                 f"{len(report['seeds'])} seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", choices=["table1", "table2"])
    ap.add_argument("--dataset", default="mnist5k")
    ap.add_argument("--protocol", choices=sorted(PROTOCOLS), default="paper")
    ap.add_argument("--settings", default="horizontal,vertical,hybrid")
    ap.add_argument("--clients", default="1,2,4,8,16")
    ap.add_argument("--epochs", type=int, default=None, help="override the protocol's epochs")
    ap.add_argument("--client-epochs", default=None,
                    help="the federated clients' epochs (default the protocol's): a client with 1/k of the rows makes "
                         "1/k of the centralized fit's updates per epoch; 'sqrt': the protocol's epochs x sqrt(k) "
                         "(horizontal; see --client-frequency sqrt)")
    ap.add_argument("--client-frequency", default=None,
                    help="the federated clients' online-EM frequency (batches per update; default the protocol's): "
                         "with 1/k of the rows a client makes 1/k of the updates per epoch at the same frequency; "
                         "'auto': the protocol's frequency times the client's share of the rows (horizontal: 1/k), "
                         "rounded, at least 1 (about as many updates as the centralized fit); 'sqrt': times the "
                         "share's square root (with --client-epochs sqrt: as many updates, each over more rows)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where every circuit trains")
    ap.add_argument("--out")
    args = ap.parse_args()
    for flag, value, words in (("--client-frequency", args.client_frequency, ("auto", "sqrt")),
                               ("--client-epochs", args.client_epochs, ("sqrt",))):
        if value is not None and value not in words and not (value.isdigit() and int(value) >= 1):
            ap.error(f"{flag} takes a number >= 1 or {' or '.join(repr(w) for w in words)}, got '{value}'")
    if args.client_frequency is not None and PROTOCOLS[args.protocol]["method"] != "online":
        ap.error(f"--client-frequency is online EM's (the paper protocol); --protocol {args.protocol} trains with "
                 f"{PROTOCOLS[args.protocol]['method']}")
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.clients = [int(k) for k in args.clients.split(",")]
    params = {**PROTOCOLS[args.protocol], "device": args.device}
    if args.epochs is not None:
        params["epochs"] = args.epochs
    results = table1(args, params) if args.table == "table1" else table2(args, params)
    report = {"table": args.table, "dataset": args.dataset, "protocol": args.protocol, "params": params,
              "client_epochs": args.client_epochs, "client_frequency": args.client_frequency,
              "note": "critical_path_seconds are CPU seconds; on a GPU they leave out the GPU's own time"
              if args.device == "cuda" else "CPU seconds, every process single-threaded",
              "seeds": args.seeds, "results": results}
    emit(report, args.out)
    if args.out and args.table == "table2":
        plot_table2(report, Path(args.out).with_suffix(".png"))


if __name__ == "__main__":  # (the guard matters: workers start by forkserver where torch sees a GPU)
    main()
