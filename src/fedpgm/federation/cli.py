"""``fedpgm federation``: the runtime's own commands (the reference moments, naive Bayes)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from fedpgm.cli_common import Backend, console, finish, prepare_outputs, stages

federation_app = typer.Typer(no_args_is_help=True, help="The federation runtime.")


@federation_app.command("moments")
def federation_moments(
    partition_dir: Path,
    backend: Backend = "inprocess",
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here")] = None,
) -> None:
    """Federated mean/covariance over client CSVs written by `fedpgm partition` (the
    runtime's reference algorithm), on either backend, with its communication cost."""
    from fedpgm.data import read_partition
    from fedpgm.federation.runner import run

    prepare_outputs(json=json_out)
    with console.status(f"federated moments over {partition_dir} ({backend}) ..."):
        result = run(read_partition(partition_dir), "moments", "moments", backend=backend)
    console.print(f"{result['n']} rows over {len(result['clients'])} clients; "
                  f"{len(result['columns'])} columns")
    for name, mean in list(zip(result["columns"], result["mean"]))[:5]:
        console.print(f"  mean {name} = {mean:.6g}")
    for client, why in result["failed"].items():
        console.print(f"[yellow]left out {client}:[/] {why}")
    finish("federation moments", result, json_out, dataset=str(partition_dir), settings={"backend": backend})


@federation_app.command("naive-bayes")
def federation_naive_bayes(
    partition_dir: Path,
    backend: Backend = "inprocess",
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the report JSON here")] = None,
) -> None:
    """Gaussian naive Bayes across the clients of a horizontal partition (class sums only; the
    worked example of docs/extending.md); accuracy on the clients' test files."""
    from fedpgm.naive_bayes import fit_report

    prepare_outputs(json=json_out)
    with stages(f"naive Bayes across {partition_dir} ({backend})"):
        result = fit_report(partition_dir, backend)
    finish("federation naive-bayes", result, json_out, settings={"backend": backend,
                                                                "partition": str(partition_dir)})
