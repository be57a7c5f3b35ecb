"""The package's import graph has no circle: every ``import`` of ``src/rcmdp_jax`` and
``envs/`` (``rcmdp_jax.envs``), read with ``ast`` (imports inside functions included), one
edge from a module to each package module it names. A module's edge to its own ancestor
package is left out: Python imports a package before its modules, so that is no circle."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREES = ((ROOT / "src" / "rcmdp_jax", "rcmdp_jax"), (ROOT / "envs", "rcmdp_jax.envs"))


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    out = {}
    for base, package in TREES:
        for path in sorted(base.rglob("*.py")):
            parts = [package, *path.relative_to(base).with_suffix("").parts]
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def named(module: str, is_package: bool, node: ast.AST) -> set[str]:
    """The dotted names an import statement names (``from a import b``: ``a`` and ``a.b``)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    if not isinstance(node, ast.ImportFrom):
        return set()
    if node.level:  # relative: from the module's package
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module
    return {source} | {f"{source}.{a.name}" for a in node.names}


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        targets = set().union(*(named(name, path.name == "__init__.py", n) for n in ast.walk(tree)))
        graph[name] = {t for t in targets if t in mods and t != name and not name.startswith(t + ".")}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of ``graph`` (a path that returns to its start), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return None


def test_the_finder_sees_a_circle_and_a_relative_import():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None
    tree = ast.parse("from .base import Rule\nfrom . import none")
    found = set().union(*(named("rcmdp_jax.constraints", True, n) for n in ast.walk(tree)))
    assert {"rcmdp_jax.constraints.base", "rcmdp_jax.constraints.none"} <= found


def test_the_package_imports_without_a_circle():
    graph = import_graph()
    assert {"rcmdp_jax.config", "rcmdp_jax.envs.domain", "rcmdp_jax.study.cli"} <= set(graph)
    assert "rcmdp_jax.study.cli" in graph["rcmdp_jax.study.console"]  # lazy imports count too (all of console's are)
    found = cycle(graph)
    assert found is None, "import circle: " + " -> ".join(found)


def test_a_name_has_one_import_path_and_an_old_one_says_where_it_lives():
    import importlib.util

    import pytest

    assert importlib.util.find_spec("rcmdp_jax.user_env") is None  # the shell's user code: study.user_code only
    import rcmdp_jax.train

    with pytest.raises(AttributeError, match="from rcmdp_jax.networks import build_networks"):
        rcmdp_jax.train.build_networks  # noqa: B018
    from rcmdp_jax.networks import build_networks  # noqa: F401
    from rcmdp_jax.study.user_code import load_spec  # noqa: F401


def test_the_library_imports_nothing_of_the_shell_and_the_search_nothing_of_the_methods():
    """The layers run one way: no module of the library (``rcmdp_jax`` outside ``study``, and
    ``rcmdp_jax.envs``) imports the study's orchestration, lazily or not (``python -m
    rcmdp_jax``, the ``rcmdp`` command's door, is no library module); the worst-case search,
    which the robust methods build on, imports none of them."""
    graph = import_graph()
    library = [m for m in graph if not m.startswith("rcmdp_jax.study") and m != "rcmdp_jax.__main__"]
    assert "rcmdp_jax.feasibility" in library and "rcmdp_jax.envs.domain" in library
    up = {m: sorted(t for t in graph[m] if t.startswith("rcmdp_jax.study")) for m in library}
    assert not {m: t for m, t in up.items() if t}, "library modules importing the study"
    assert not [t for t in graph["rcmdp_jax.worst_case"] if t.startswith("rcmdp_jax.adversary")]


def test_the_console_imports_nothing_heavy_before_a_command_starts():
    # the commands' entry point splits the CPU (XLA_FLAGS) and catches Ctrl-C as a command starts: importing
    # it must not import JAX (a second and more under load, in which Ctrl-C would be a traceback)
    import subprocess
    import sys

    code = "import sys, rcmdp_jax.study.console; print(sorted(m for m in ('jax', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
