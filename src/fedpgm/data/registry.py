"""The dataset registry: names (``adult``, ``debd:nltcs``, ``bn:asia``, ``csv:PATH``...) to loaders.

A loader is registered under a name, or under a family prefix for names of the form
``family:argument``. Each declares which load options it accepts, so an option that does not
apply (``--rows`` for ``adult``) is an error rather than silently ignored.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from fedpgm.data.dataset import Dataset
from fedpgm.errors import FedpgmError

DATA_ENV = "FEDPGM_DATA"


@dataclass(frozen=True)
class LoadOptions:
    """Options a user may pass to a loader; ``None`` means the loader's default."""

    data_dir: Path | None = None
    seed: int = 0
    test_size: float | None = None
    rows: int | None = None
    label: str | None = None
    schema: Path | None = None
    missing: str | None = None
    keep: tuple[str, ...] = ()  # csv: columns to model even if they look like row ids

    def set_options(self) -> set[str]:
        names = ("test_size", "rows", "label", "schema", "missing")
        return {n for n in names if getattr(self, n) is not None} | ({"keep"} if self.keep else set())


@dataclass(frozen=True)
class Loader:
    """A dataset (or a family of them, ``name:MEMBER``) in the registry: how to load it, which
    loader options it takes, and how to list or describe it cheaply."""
    name: str
    description: str
    load: Callable[[str | None, LoadOptions], Dataset]
    family: bool = False
    options: frozenset[str] = frozenset()
    members: Callable[[LoadOptions], list[str]] | None = None  # family members to list
    describe: Callable[[str | None, LoadOptions], dict] | None = None  # cheap summary
    files: tuple[str, ...] = field(default_factory=tuple)  # files it needs, for messages


REGISTRY: dict[str, Loader] = {}


def register(name: str, description: str, *, family: bool = False, options: tuple[str, ...] = (),
             members=None, describe=None, files: tuple[str, ...] = ()):
    """Decorator: register ``fn(arg, options) -> Dataset`` under ``name``."""

    def wrap(fn):
        REGISTRY[name] = Loader(name, description, fn, family, frozenset(options), members,
                                describe, files)
        return fn

    return wrap


def default_data_dir() -> Path | None:
    """``$FEDPGM_DATA``, else ``../shared/data`` beside the working directory or the checkout."""
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env)
    candidates = [Path.cwd() / ".." / "shared" / "data",
                  Path(__file__).resolve().parents[3] / ".." / "shared" / "data"]
    for c in candidates:
        if c.is_dir():
            return c.resolve()
    return None


def resolve_data_dir(options: LoadOptions) -> Path:
    """The data directory to read from, or an error telling how to give one."""
    d = options.data_dir or default_data_dir()
    if d is None:
        raise FedpgmError(
            f"no data directory: pass --data-dir DIR or set {DATA_ENV} to the folder that holds "
            "adult/, give_me_some_credit/ and debd/"
        )
    if not Path(d).is_dir():
        raise FedpgmError(f"data directory {d} does not exist; pass an existing --data-dir")
    return Path(d)


def require_file(path: Path, dataset: str) -> Path:
    if not path.is_file():
        raise FedpgmError(
            f"dataset '{dataset}' needs the file {path}, which does not exist; put it there or "
            f"point --data-dir/{DATA_ENV} at the folder that holds it"
        )
    return path


def split_spec(spec: str) -> tuple[Loader, str | None]:
    """Find the loader for ``name`` or ``family:argument``."""
    name, sep, arg = spec.partition(":")
    loader = REGISTRY.get(name)
    if loader is None or loader.family != bool(sep):
        known = ", ".join(sorted(n + (":..." if l.family else "") for n, l in REGISTRY.items()))
        raise FedpgmError(f"unknown dataset '{spec}'; known datasets: {known} (see `fedpgm datasets`)")
    if sep and not arg:
        raise FedpgmError(f"dataset '{spec}' needs an argument after ':' (e.g. {name}:NAME)")
    return loader, (arg if sep else None)


def load_dataset(spec: str, **kwargs) -> Dataset:
    """Load a dataset by name, e.g. ``load_dataset("bn:asia", rows=5000, seed=1)``.

    Keyword options: ``data_dir``, ``seed``, ``test_size``, ``rows``, ``label``, ``schema``
    (path of a schema JSON), ``missing`` (``keep`` or ``impute``) and ``keep`` (csv: columns to
    model even if they look like row ids).
    """
    for key in ("data_dir", "schema"):
        if kwargs.get(key) is not None:
            kwargs[key] = Path(kwargs[key])
    kwargs["keep"] = tuple(kwargs.get("keep") or ())
    options = LoadOptions(**kwargs)
    loader, arg = split_spec(spec)
    extra = options.set_options() - loader.options
    if extra:
        allowed = ", ".join(sorted(loader.options)) or "none"
        raise FedpgmError(
            f"option(s) {sorted(extra)} do not apply to dataset '{spec}' (it accepts: {allowed})"
        )
    if options.rows is not None and options.rows < 1:
        raise FedpgmError(f"rows must be at least 1, got {options.rows}")
    return loader.load(arg, options)


def dataset_names(options: LoadOptions | None = None) -> list[str]:
    """Every loadable name: plain loaders and the members of each family that can be found."""
    options = options or LoadOptions()
    names = []
    for name, loader in REGISTRY.items():
        if not loader.family:
            names.append(name)
        elif loader.members is not None:
            names.extend(f"{name}:{m}" for m in loader.members(options))
    return names


def describe_dataset(spec: str, options: LoadOptions | None = None) -> dict:
    """Rows, columns, column types and label of a dataset, cheaply where the loader can."""
    options = options or LoadOptions()
    loader, arg = split_spec(spec)
    if loader.describe is not None:
        return loader.describe(arg, options)
    ds = loader.load(arg, options)
    return {"rows": ds.n_rows, "columns": len(ds.schema), "types": ds.schema.kind_counts(),
            "label": ds.schema.label}
