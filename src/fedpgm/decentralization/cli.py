"""``fedpgm decentralization``: the cost of decentralization in vertical federations."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from fedpgm.cli_common import DataDir, Seed, console, finish, prepare_outputs
from fedpgm.errors import FedpgmError

dec_app = typer.Typer(no_args_is_help=True,
                      help="Cost of decentralization in vertical federations (exact Bayesian losses).")
JsonOut = Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here")]
PlotOut = Annotated[Optional[Path], typer.Option("--plot", help="Write a PNG plot here (with --curve)")]


def report_losses(result: dict, bits: bool) -> None:
    from fedpgm.decentralization.examples import to_bits

    unit = "bits" if bits else "nats"
    losses = to_bits(result["losses_nats"]) if bits else result["losses_nats"]
    console.print("  ".join(f"{k} {v:.6f}" for k, v in losses.items()) + f" ({unit})")


def report_curve(command: str, settings: dict, rows: list[dict], x_key: str, x_label: str, title: str, bits: bool,
                 plot: Path | None, json_out: Path | None) -> None:
    """Print one line per point, then write the plot and the JSON when asked."""
    from fedpgm.decentralization.examples import plot_curve

    for row in rows:
        console.print(f"{x_label} = {row[x_key]:.3f}:", end=" ")
        report_losses(row, bits)
    if plot is not None:
        plot_curve(rows, x_key, x_label, plot, title)
    finish(command, rows, json_out, settings=settings, show=False)


@dec_app.command("example-a")
def dec_example_a(
    r: Annotated[float, typer.Option(help="P[X1 = X2]")] = 0.75,
    n: Annotated[int, typer.Option(help="training samples N")] = 3,
    curve: Annotated[bool, typer.Option(help="a grid over r (the paper's Fig. 2)")] = False,
    bits: Annotated[bool, typer.Option(help="print losses in bits")] = False,
    json_out: JsonOut = None, plot: PlotOut = None,
) -> None:
    """Example A: two agents, losses of CL/CI, CL/DI, DL/CI, DL/DI vs I(X1; X2)."""
    from fedpgm.decentralization import examples as ex
    from fedpgm.decentralization.bruteforce import conditional_mutual_informations

    prepare_outputs(json=json_out, plot=plot)
    if curve:
        report_curve("decentralization example-a", {"n": n, "curve": True}, ex.example_a_curve(n), "mi_bits",
                     "I(X1; X2) (bits)",
                     f"Example A, N = {n}, no privacy", bits, plot, json_out)
        return
    result = ex.example_a_point(r, n)
    if n <= 4:  # the same mutual informations by independent enumeration of sequences
        result["conditional_mi_nats_enumeration"] = conditional_mutual_informations(ex.example_a(r, n))
    report_losses(result, bits)
    finish("decentralization example-a", result, json_out, settings={"r": r, "n": n}, show=False)


@dec_app.command("example-b")
def dec_example_b(
    r: Annotated[float, typer.Option(help="P[X1 = X2] = P[X3 = X2]")] = 0.5,
    eps: Annotated[float, typer.Option(help="privacy budget in bits")] = 0.5,
    n: Annotated[int, typer.Option(help="training samples N")] = 3,
    curve: Annotated[bool, typer.Option(help="a grid over eps (the paper's Fig. 3)")] = False,
    bits: Annotated[bool, typer.Option(help="print losses in bits")] = False,
    json_out: JsonOut = None, plot: PlotOut = None,
) -> None:
    """Example B: three agents sharing X1^X2^X3^E; eps-private losses, optimal noise s."""
    from fedpgm.decentralization import examples as ex
    from fedpgm.decentralization.bruteforce import conditional_mutual_informations

    prepare_outputs(json=json_out, plot=plot)
    if curve:
        report_curve("decentralization example-b", {"r": r, "n": n, "curve": True}, ex.example_b_curve(r, n),
                     "eps_bits", "privacy budget eps (bits)",
                     f"Example B, r = {r}, N = {n}", bits, plot, json_out)
        return
    result = ex.example_b_point(r, eps, n)
    if n <= 2:  # the same mutual informations by enumeration of every sequence: 16^(N+1) terms
        result["conditional_mi_nats_enumeration"] = conditional_mutual_informations(ex.example_b(r, n))
    console.print(f"optimal noise s: {result['s']}")
    report_losses(result, bits)
    finish("decentralization example-b", result, json_out, settings={"r": r, "eps_bits": eps, "n": n}, show=False)


@dec_app.command("estimate")
def dec_estimate(
    dataset: str,
    clients: Annotated[int, typer.Option("--clients", help="agents K (vertical split)")] = 2,
    seed: Seed = 0,
    min_instances: Annotated[int, typer.Option(help="LearnSPN min rows per slice")] = 200,
    threshold: Annotated[float, typer.Option(help="LearnSPN RDC threshold")] = 0.3,
    rounds: Annotated[int, typer.Option(help="bootstrap resamples")] = 1000,
    data_dir: DataDir = None, json_out: JsonOut = None,
) -> None:
    """Per-agent CL/CI, CL/DI and DL/DI log-loss on held-out rows, with 95% bootstrap intervals."""
    from fedpgm.decentralization.estimates import estimate

    if clients < 1:
        raise FedpgmError(f"--clients must be >= 1, got {clients}")
    if rounds < 1:
        raise FedpgmError(f"--rounds must be >= 1 (bootstrap resamples), got {rounds}")
    prepare_outputs(json=json_out)
    with console.status(f"learning circuits on {dataset} ..."):
        result = estimate(dataset, clients, seed, min_instances, threshold, rounds=rounds, data_dir=data_dir)
    lo, hi = result["CL/CI"]["ci95"]
    console.print(f"CL/CI log-loss {result['CL/CI']['log_loss_nats']:.4f} nats [{lo:.4f}, {hi:.4f}]")
    table = Table(title=f"{result['dataset']}: cost of decentralization per agent (nats, 95% CI)")
    for col in ("agent", "CL/DI", "DL/DI", "CL/DI-CL/CI", "DL/DI-CL/CI", "DL/DI-CL/DI"):
        table.add_column(col)
    for agent, v in result["agents"].items():
        table.add_row(agent, *[f"{v[k]['nats']:.4f} [{v[k]['ci95'][0]:.3f}, {v[k]['ci95'][1]:.3f}]"
                               for k in ("CL/DI", "DL/DI", "CL/DI-CL/CI", "DL/DI-CL/CI", "DL/DI-CL/DI")])
    console.print(table, width=min(console.width, 80))
    finish("decentralization estimate", result, json_out, show=False,
           settings={"clients": clients, "seed": seed, "bootstrap_rounds": rounds,
                     "learner": result.pop("learner")})
