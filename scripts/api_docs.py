"""Build the API reference (HTML, pdoc) from the docstrings into ``build/api`` and fail on a
broken one: a name in ``__all__`` that does not resolve, a docstring pdoc cannot render, or a
public module, class or exported name (a package's ``__all__``) without a docstring. Public helper
functions without one are counted, not refused.

    python scripts/api_docs.py [--out build/api]

Run by ``make docs`` and by ``make test`` (so CI fails on a broken docstring).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import warnings
from pathlib import Path

import pdoc
import pdoc.doc
import pdoc.render

PACKAGE = "fedpgm"
SKIP = ("fedpgm.federation.flower_app",)  # Flower's app folder (a pyproject.toml, no Python API)


def module_names() -> list[str]:
    package = importlib.import_module(PACKAGE)
    names = [PACKAGE] + [m.name for m in pkgutil.walk_packages(package.__path__, f"{PACKAGE}.")]
    return [n for n in names if not n.startswith(SKIP)]


def resolve_lazy_names(names: list[str]) -> None:
    """Packages that import their ``__all__`` on first use (module ``__getattr__``, to keep the CLI's
    start-up light) get those names bound, so pdoc documents them where they are exported."""
    for name in names:
        module = importlib.import_module(name)
        if hasattr(module, "__getattr__") and hasattr(module, "__all__"):
            for attr in module.__all__:
                setattr(module, attr, getattr(module, attr))


def exported(names: list[str]) -> set[str]:
    """``module.qualname`` of every name a package lists in ``__all__``."""
    out = set()
    for name in names:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            obj = getattr(module, attr)
            out.add(f"{getattr(obj, '__module__', name)}.{getattr(obj, '__qualname__', attr)}")
    return out


def undocumented(module: pdoc.doc.Module, required: set[str]) -> tuple[list[str], list[str]]:
    """(required, other) public names defined in ``module`` without a docstring: the module itself,
    its classes and the names in ``required`` first; other functions and methods second."""
    missing = ([] if module.docstring.strip() else [module.fullname]), []
    for member in module.flattened_own_members:
        if member.name.startswith("_") or not isinstance(member, (pdoc.doc.Class, pdoc.doc.Function)):
            continue
        if member.taken_from[0] != module.modulename or (member.docstring or "").strip():
            continue  # documented here, or where it is defined
        must = isinstance(member, pdoc.doc.Class) or member.fullname in required
        missing[0 if must else 1].append(member.fullname)
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/api"))
    args = parser.parse_args(argv)
    names = module_names()
    resolve_lazy_names(names)
    pdoc.render.configure(docformat="restructuredtext", search=True, show_source=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*names, output_directory=args.out)
    problems = [str(w.message) for w in caught if issubclass(w.category, UserWarning)
                and "has already been added" not in str(w.message)]  # a package listing its own modules
    required, helpers = exported(names), 0
    for name in names:
        must, other = undocumented(pdoc.doc.Module(importlib.import_module(name)), required)
        problems += [f"{n}: no docstring" for n in must]
        helpers += len(other)
    for p in problems:
        print(f"api docs: {p}", file=sys.stderr)
    print(f"api docs: {len(names)} modules -> {args.out}/index.html; {len(problems)} problem(s); "
          f"{helpers} public helper functions without a docstring")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
