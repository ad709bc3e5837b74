"""One report schema for every command, and one table renderer.

Every ``--json`` a command writes (and ``fedpgm run``'s report.json) is a dict with these keys::

    {"schema": "fedpgm-report/1", "fedpgm_version": "0.1.0", "command": "fedpc fit",
     "dataset": "breast_cancer", "settings": {...}, "metrics": {...},
     "communication": {...}, "timing": {...}, "details": {...}}

``make_report`` builds it from the flat dict a library function returns, by the meaning of each
key, the same rule for every family:

- ``timing``: keys ending in ``seconds`` and ``relative_runtime*`` (CPU or wall seconds, ratios);
- ``communication``: ``bytes*``, ``messages``, ``rounds``, ``alignment`` (PSI), ``left_out``
  (clients that did not answer) and ``shared_with_server``;
- ``settings``: what the command was asked to do (passed explicitly), plus the result's own
  ``settings``/``params``; a result key repeating a setting (at any depth) with the same value
  is dropped (but never a communication or timing figure: ``rounds`` run stays beside a
  ``rounds`` limit);
- ``metrics``: numbers, flags, and lists or dicts holding only numbers (``test_loglik``,
  ``accuracy``, ``n_train``, a loss curve, a confidence interval); a result's own ``metrics``
  dict is merged in as it is;
- ``details``: the rest (text such as a plan, names of clients, mixed records).

``render`` prints a report's metrics, communication and timing, and the numbers among its
details, as one two-column table that fits 80 columns (nested dicts shown as dotted names).
"""

from __future__ import annotations

from numbers import Number
from typing import Any

SCHEMA = "fedpgm-report/1"
SECTIONS = ("settings", "metrics", "communication", "timing", "details")
COMMUNICATION_KEYS = frozenset({"messages", "rounds", "alignment", "left_out", "shared_with_server"})
WIDTH = 80


def section_of(key: str, value: Any) -> str:
    """The section a result key belongs to (the rule in the module docstring)."""
    if key.endswith("seconds") or key.startswith("relative_runtime"):
        return "timing"
    if key.startswith("bytes") or key in COMMUNICATION_KEYS:
        return "communication"
    if key == "params":
        return "settings"
    return "metrics" if numeric(value) else "details"


def numeric(value: Any) -> bool:
    """A number, a flag, None, or a list/dict holding only such values."""
    if value is None or isinstance(value, (bool, Number)):
        return True
    if isinstance(value, dict):
        return all(numeric(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(numeric(v) for v in value)
    return False


def make_report(command: str, result: dict | list, dataset: str | None = None, settings: dict | None = None,
                runs: dict[str, dict] | None = None) -> dict:
    """The schema's dict for ``result`` (a command's flat dict, or a list of rows, kept whole as
    ``metrics["rows"]``). ``dataset`` defaults to the result's ``dataset`` or ``network``.
    ``runs`` (name -> flat dict, ``fedpgm run``'s runs) are sorted by the same rule and kept under
    ``by_run`` in each section they have keys in."""
    from fedpgm import __version__

    if isinstance(result, list):
        result = {"rows": result}
    dataset = dataset if dataset is not None else result.get("dataset", result.get("network"))
    rest = {k: v for k, v in result.items() if k not in ("dataset", "network") or v != dataset}
    sections = sort_keys(rest, settings)
    for name, run in (runs or {}).items():
        for section, values in sort_keys(run).items():
            if values:
                sections[section].setdefault("by_run", {})[name] = values
    return {"schema": SCHEMA, "fedpgm_version": __version__, "command": command, "dataset": dataset,
            **sections}


def sort_keys(result: dict, settings: dict | None = None) -> dict[str, dict]:
    """``result``'s keys sorted into the sections (``settings`` first, the result's own
    ``settings``/``metrics``/... dicts merged into theirs, repeated settings dropped)."""
    sections: dict[str, dict] = {name: {} for name in SECTIONS}
    sections["settings"].update(settings or {})
    for name in SECTIONS:
        if isinstance(result.get(name), dict):
            for k, v in result[name].items():
                sections[name].setdefault(k, v)
    asked = leaves(sections["settings"])
    for key, value in result.items():
        if key in SECTIONS and isinstance(value, dict):
            continue
        where = section_of(key, value)
        if where in ("metrics", "details") and any(
                type(v) is type(value) and not isinstance(v, (dict, list)) and v == value for v in asked.get(key, ())):
            continue  # repeats what the command was asked to do (at any depth of its settings)
        sections[where][key] = value
    return sections


def leaves(tree: dict) -> dict[str, list]:
    """Every key of a nested dict with the values it has anywhere in it."""
    out: dict[str, list] = {}
    for key, value in tree.items():
        out.setdefault(key, []).append(value)
        if isinstance(value, dict):
            for k, values in leaves(value).items():
                out.setdefault(k, []).extend(values)
    return out


def check_report(report: dict) -> dict:
    """``report`` follows the schema (every key present, sections are dicts), else ValueError."""
    expected = {"schema", "fedpgm_version", "command", "dataset", *SECTIONS}
    if set(report) != expected:
        raise ValueError(f"report keys {sorted(report)} differ from the schema's {sorted(expected)}")
    if report["schema"] != SCHEMA or not isinstance(report["command"], str):
        raise ValueError(f"not a {SCHEMA} report: schema {report['schema']!r}, command {report['command']!r}")
    bad = [s for s in SECTIONS if not isinstance(report[s], dict)]
    if bad:
        raise ValueError(f"report sections {bad} are not dicts")
    return report


def rows_of(section: dict, prefix: str = "", depth: int = 3, numbers_only: bool = False) -> list[tuple[str, str]]:
    """(dotted name, formatted value) for every leaf of ``section``, nested dicts to ``depth``
    (``numbers_only``: only the leaves that are single numbers)."""
    out = []
    for key, value in section.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value and depth > 1:
            out += rows_of(value, name + ".", depth - 1, numbers_only)
        elif not numbers_only or (isinstance(value, Number) and not isinstance(value, bool)):
            out.append((name, fmt(value)))
    return out


def fmt(value: Any) -> str:
    """A value in a few characters: 4 significant digits for floats, thousands separators for
    counts, lists shortened."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value or abs(value) in (0.0, float("inf")) or 1e-3 <= abs(value) < 1e5:
            return f"{value:.4f}"
        return f"{value:,.0f}" if abs(value) >= 1e5 else f"{value:.3e}"
    if isinstance(value, (list, tuple)) and any(isinstance(v, (dict, list, tuple)) for v in value):
        return f"{len(value)} records"
    if isinstance(value, (list, tuple)):
        shown = ", ".join(fmt(v) for v in value[:4])
        return f"[{shown}{', ...' if len(value) > 4 else ''}] ({len(value)})" if len(value) > 4 else f"[{shown}]"
    return str(value)


def render(report: dict, console=None,
           sections: tuple[str, ...] = ("metrics", "communication", "timing", "details")) -> None:
    """Print ``sections`` of ``report`` (of ``details``, the numbers) as one table at most 80
    columns wide."""
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    title = f"{report['command']}" + (f" on {report['dataset']}" if report.get("dataset") else "")
    table = Table(title=escape(title), box=box.SIMPLE, show_header=False, padding=(0, 1), pad_edge=False)
    table.add_column("name", overflow="fold", ratio=3)
    table.add_column("value", overflow="fold", justify="right", ratio=2)
    for section in sections:
        rows = rows_of(report[section], numbers_only=section == "details")
        if not rows:
            continue
        table.add_row(f"[bold]{section}[/]", "")
        for name, value in rows:
            table.add_row(f"  {escape(name)}", escape(value))
    console.print(table, width=min(console.width, WIDTH))
