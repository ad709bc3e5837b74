"""The ``fedpgm`` command line: one Typer app, one sub-command (group) per capability.

User errors (``FedpgmError``) print one line, ``error: ...``, on stderr and exit with code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from fedpgm.cli_common import (DataDir, Force, Keep, Label, Missing, Rows, SchemaFile, Seed, TestSize, console, load,
                               one_of, prepare_outputs, stages)
from fedpgm.errors import FedpgmError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Federated learning of probabilistic, graphical and interpretable models.")


def print_version(value: bool) -> None:
    if value:
        from fedpgm import __version__

        console.print(f"fedpgm {__version__}")
        raise typer.Exit()


@app.callback()
def options(version: Annotated[bool, typer.Option("--version", callback=print_version, is_eager=True,
                                                  help="Print the version and exit")] = False) -> None:
    """Federated learning of probabilistic, graphical and interpretable models."""


def types_text(types: dict[str, int]) -> str:
    """``{"continuous": 3, "binary": 1}`` -> ``"3 cont, 1 bin"``."""
    return ", ".join(f"{n} {k[:3] if k != 'continuous' else 'cont'}" for k, n in types.items())


@app.command()
def datasets(data_dir: DataDir = None) -> None:
    """List the dataset registry: name, rows, columns, column types, label."""
    from fedpgm.data.registry import REGISTRY, LoadOptions, describe_dataset

    options = LoadOptions(data_dir=data_dir)
    table = Table(title="fedpgm datasets")
    table.add_column("name", no_wrap=True)
    for col in ("rows", "cols", "types", "label"):
        table.add_column(col, overflow="fold")
    for name, loader in REGISTRY.items():
        members = [None] if not loader.family else (loader.members(options) if loader.members else [])
        for member in members:
            spec = name if member is None else f"{name}:{member}"
            try:
                d = describe_dataset(spec, options)
            except FedpgmError as e:
                table.add_row(spec, "-", "-", "-", "-")
                console.print(f"[yellow]{spec} unavailable:[/] {e}")
                continue
            table.add_row(spec, str(d["rows"]), str(d["columns"]), types_text(d["types"]),
                          str(d["label"] or "-"))
    console.print(table)
    for name, loader in REGISTRY.items():
        console.print(f"[bold]{name}{':...' if loader.family else ''}[/]  {loader.description}")


@app.command()
def schema(dataset: str, data_dir: DataDir = None, label: Label = None, keep: Keep = None,
           out: Annotated[Optional[Path], typer.Option("--out", help="Write the schema JSON here")] = None,
           seed: Seed = 0) -> None:
    """Show a dataset's schema (inferred for csv:PATH, with the reason for each type)."""
    prepare_outputs(out=out)
    ds = load(dataset, data_dir, seed, label=label)
    table = Table(title=f"schema of {ds.name}")
    for col in ("column", "type", "categories"):
        table.add_column(col, overflow="fold")
    for f in ds.schema.features:
        cats = "" if f.categories is None else ", ".join(f.categories[:12]) + (
            " ..." if f.cardinality > 12 else "")
        name = f.name + (" (label)" if f.name == ds.schema.label else "")
        table.add_row(name, f.kind, cats)
    console.print(table)
    if "schema_source" in ds.info:
        console.print(ds.info["schema_source"])
    if out is not None:
        ds.schema.save(out)
        console.print(f"wrote {out}")


def print_partition(part) -> None:
    table = Table(title=f"{part.dataset}: {part.split} partition, {len(part.clients)} clients")
    for col in ("client", "train rows", "test rows", "columns", "label", "classes"):
        table.add_column(col)
    for row in part.summary():
        table.add_row(row["client"], str(row["train_rows"]), str(row["test_rows"]),
                      str(row["columns"]), "yes" if row["label"] else "no",
                      ",".join(map(str, row.get("classes", []))) or "-")
    console.print(table)


@app.command("partition")
def partition_cmd(
    dataset: str,
    split: Annotated[str, typer.Option("--split", help="horizontal, vertical or hybrid", click_type=one_of("split"))],
    clients: Annotated[int, typer.Option("--clients", help="Number of clients K")],
    out: Annotated[Path, typer.Option("--out", help="Folder for client CSVs + manifest.json")],
    seed: Seed = 0,
    scheme: Annotated[Optional[str], typer.Option(help="horizontal: iid, label-skew, dirichlet",
                                                  click_type=one_of("scheme"))] = None,
    alpha: Annotated[Optional[float], typer.Option(help="horizontal dirichlet: concentration")] = None,
    classes_per_client: Annotated[Optional[int], typer.Option(help="horizontal label-skew")] = None,
    groups: Annotated[Optional[str], typer.Option(help='vertical: column groups "a,b;c,d"')] = None,
    label_to: Annotated[Optional[str], typer.Option(help="vertical/hybrid: client id or 'all'")] = None,
    shared: Annotated[Optional[int], typer.Option(help="hybrid: number of shared columns")] = None,
    overlap: Annotated[Optional[float], typer.Option(
        help="hybrid, vertical: fraction of rows on all clients (vertical: default 1, every row; below "
             "1 the parties' ids differ, see fedpc fit --align)")] = None,
    force: Annotated[bool, typer.Option(help="Replace a non-empty --out folder")] = False,
    data_dir: DataDir = None, rows: Rows = None, label: Label = None, schema: SchemaFile = None,
    missing: Missing = None, test_size: TestSize = None, keep: Keep = None,
) -> None:
    """Split a dataset across K clients; write one CSV per client and a JSON manifest."""
    from fedpgm.data import partition

    prepare_outputs(out, force)

    options = {k: v for k, v in dict(scheme=scheme, alpha=alpha, classes_per_client=classes_per_client,
                                       groups=groups, label_to=label_to, shared=shared,
                                       overlap=overlap).items() if v is not None}
    ds = load(dataset, data_dir, seed, rows, label, schema, missing, test_size)
    part = partition(ds, split, clients, seed, **options)
    part.write(out, overwrite=force)
    print_partition(part)
    console.print(f"wrote {out}/manifest.json and {len(part.clients)} client CSV pairs")


@app.command("run")
def run_config(
    config: Annotated[Path, typer.Argument(help="A TOML experiment file (see fedpgm.fedpc.config_run)")],
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Output folder (default: out = ... in the file's \\[experiment] table)")] = None,
    force: Force = False,
) -> None:
    """Run the experiment a TOML file describes: FC[PC]/FC[DT] runs and baselines on one dataset,
    with a summary table, report.json and summary.png."""

    from fedpgm.fedpc.config_run import COLUMNS, read_config, run_experiment, run_values, write_outputs
    from rich import box
    from rich.markup import escape

    spec = read_config(config)
    folder = out or spec["experiment"].get("out")
    if folder is None:
        raise FedpgmError("say where to write the results: --out DIR or [experiment] out = \"DIR\"")
    outputs = prepare_outputs(Path(folder), force)
    with stages("loading") as update:
        report = run_experiment(spec, progress=lambda text: update(description=text))
    metrics = report["metrics"]
    table = Table(title=f"{report['dataset']} ({metrics['n_train']} train / {metrics['n_test']} test rows)",
                  box=box.SIMPLE, padding=(0, 1), pad_edge=False)
    table.add_column("run", overflow="fold")
    for _, _, header in COLUMNS:
        table.add_column(header, justify="right")
    for name, values in run_values(report).items():
        table.add_row(escape(name), *["-" if values[key] is None else f"{values[key]:,}" if key == "bytes"
                                      else f"{values[key]:.3f}" for _, key, _ in COLUMNS])
    console.print(table, width=min(console.width, 80))
    with outputs:
        write_outputs(report, folder)
    console.print(f"wrote {folder}/report.json and summary.png")


@app.command()
def demo() -> None:
    """The main job: FedPC on breast cancer across horizontal, vertical and hybrid federations."""
    from fedpgm.fedpc.cli import demo as fedpc_demo

    fedpc_demo()


def main(argv: list[str] | None = None) -> None:
    """Console entry point: runs the app, turning user errors into one line and exit code 2, and
    SIGTERM/SIGHUP into a clean stop (every process started stopped, temporary folders removed,
    nothing half-written) with exit code 128 + the signal (143 for SIGTERM)."""
    import click

    from fedpgm.federation.lifecycle import Terminated, stop_on_signals

    try:
        with stop_on_signals():
            code = app(args=argv, prog_name="fedpgm", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError:  # a group without a command (typer printed its help)
        sys.exit(2)
    except click.UsageError as e:  # a bad option or value, before any work
        where = f"; see `{e.ctx.command_path} --help`" if e.ctx else ""
        print(f"error: {' '.join(e.format_message().split()).rstrip('.')}{where}", file=sys.stderr)
        sys.exit(2)
    except click.ClickException as e:
        print(f"error: {e.format_message()}", file=sys.stderr)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:  # Ctrl-C at a prompt
        sys.exit(130)
    except FedpgmError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except Terminated as t:
        print(f"fedpgm: {t}; stopped every process it started and removed its temporary files",
              file=sys.stderr)
        sys.exit(128 + t.signum)
    sys.exit(code if isinstance(code, int) else 0)  # (--help, --version: 0)


def register_groups() -> None:
    """Sub-command groups that live beside their capability (imported last: they use the
    shared options above)."""
    from fedpgm.circuits.cli import pc_app
    from fedpgm.concepts.cli import concepts_app
    from fedpgm.decentralization.cli import dec_app
    from fedpgm.federation.cli import federation_app
    from fedpgm.fedpc.cli import fedpc_app
    from fedpgm.ngm.cli import ngm_app

    app.add_typer(federation_app, name="federation")
    app.add_typer(pc_app, name="pc")
    app.add_typer(dec_app, name="decentralization")
    app.add_typer(concepts_app, name="concepts")
    app.add_typer(fedpc_app, name="fedpc")
    app.add_typer(ngm_app, name="ngm")


register_groups()

if __name__ == "__main__":
    main()
