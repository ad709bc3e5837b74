"""The layout the design promises (docs/extending.md): no import circle between fedpgm's modules,
counting imports made inside functions too (only ``if TYPE_CHECKING:`` blocks never run), one
place that knows the backends, and files of a readable size."""

import ast
from pathlib import Path

import networkx as nx

SRC = Path(__file__).parents[1] / "src"


def modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def imports(tree: ast.AST) -> list[str]:
    """Every fedpgm module name an import statement of ``tree`` names, ``TYPE_CHECKING`` aside."""
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
               and getattr(node.test, "id", "") == "TYPE_CHECKING" for n in ast.walk(node)}
    names = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return [n for n in names if n.startswith("fedpgm")]


def import_graph() -> nx.DiGraph:
    mods = modules()
    graph = nx.DiGraph()
    for name, path in mods.items():
        graph.add_node(name)
        for target in imports(ast.parse(path.read_text())):
            while target and target not in mods:  # (a name imported from a module: the module)
                target = target.rpartition(".")[0]
            package_of_name = name.startswith(target + ".") and mods[target].name == "__init__.py"
            if target and target != name and not package_of_name:
                graph.add_edge(name, target)
    return graph


def test_no_import_circle_even_through_imports_inside_functions():
    graph = import_graph()
    assert graph.number_of_nodes() > 100 and graph.number_of_edges() > 300  # (the scan found the imports)
    circles = [c for c in nx.simple_cycles(graph) if len(c) > 1]
    assert circles == [], circles[:5]


def test_only_the_runner_and_the_runtime_start_federations():
    """``InProcessFederation`` and ``LoopbackDeployment`` are built in ``federation.runner`` (and the
    runtime's own modules); families reach the backends through it (the baselines are in-process
    peers of FedPC's experiments, not families)."""
    allowed = {"fedpgm.federation.runner", "fedpgm.federation.inprocess", "fedpgm.federation.deploy",
               "fedpgm.fedpc.config_run"}
    builders = set()
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("InProcessFederation",
                                                                               "LoopbackDeployment"):
                builders.add(name)
    assert builders and builders <= allowed, builders - allowed


def test_source_files_stay_readable():
    lengths = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    assert lengths["fedpgm.cli"] < 250
    assert {n: k for n, k in lengths.items() if k > 500} == {}
