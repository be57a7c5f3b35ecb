"""What ``pip install`` installs: every package of the source tree (a folder with an
``__init__.py`` under ``src/rcmdp_jax`` or ``envs``) is listed in ``pyproject.toml``, so
a new subpackage cannot be left out of a non-editable install; and what CI runs (``.ci/run``):
the README's test command verbatim, then the checks it leaves out."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _setuptools_table() -> dict:
    try:
        import tomllib  # Python 3.11+
    except ImportError:  # Python 3.10: the same parser, installed with the test extra
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def source_packages(root: Path, package_dir: dict) -> set[str]:
    """The dotted names of the folders with an ``__init__.py`` under each mapped folder,
    named from the mapping (``rcmdp_jax.envs`` = ``envs``)."""
    found = set()
    for name, folder in package_dir.items():
        base = root / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base).parts
            found.add(".".join((name, *rel)))
    return found


def test_every_package_of_the_source_tree_is_installed():
    table = _setuptools_table()
    listed = set(table["packages"])
    in_tree = source_packages(ROOT, table["package-dir"])
    assert {"rcmdp_jax.adversary", "rcmdp_jax.study", "rcmdp_jax.envs"} <= in_tree  # the walk finds subpackages
    assert in_tree - listed == set(), f"add to pyproject.toml's packages: {sorted(in_tree - listed)}"
    assert listed - in_tree == set(), f"listed but not in the tree: {sorted(listed - in_tree)}"


def test_the_walk_names_a_nested_package_from_its_mapping(tmp_path):
    (tmp_path / "lib" / "sub" / "deeper").mkdir(parents=True)
    for folder in ("lib", "lib/sub", "lib/sub/deeper"):
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "lib" / "data").mkdir()  # no __init__.py: not a package
    assert source_packages(tmp_path, {"pkg": "lib"}) == {"pkg", "pkg.sub", "pkg.sub.deeper"}


def readme_test_command(readme: str) -> str:
    """The command of the first ```bash block after README's "run the test suite"."""
    after = readme[readme.index("run the test suite") :]
    block = after[after.index("```bash\n") + len("```bash\n") :]
    return block[: block.index("```")].strip()


def test_ci_runs_the_readme_test_command_and_then_the_slow_checks():
    readme = (ROOT / "README.md").read_text()
    command = readme_test_command(readme)
    assert "python -m pytest tests" in command and "not slow" in command, command
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    steps = [line.split(" || ")[0] for line in ci if "pytest" in line and not line.startswith(("#", "echo"))]
    # the README's command verbatim first, then every check it leaves out: nothing goes unrun
    assert steps == [command, "python -m pytest tests -m slow"], steps
    assert ci[-1] == '[ "$first" -eq 0 ] && [ "$second" -eq 0 ]'  # either step failing fails CI
    assert "python -m pytest tests -m slow" in readme  # README says what CI's second step runs


def test_the_readme_test_command_is_read_from_its_block():
    text = 'x\nand run the test suite (CI):\n\n```bash\npip install -e . && python -m pytest tests -m "not slow"\n```\n'
    assert readme_test_command(text) == 'pip install -e . && python -m pytest tests -m "not slow"'
