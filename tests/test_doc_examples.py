"""The Python examples of README.md and docs/ run as the pages write them, each page's blocks in
order in one namespace in a fresh folder (tests/doc_examples.py: what is checked). The blocks
that read the safe-RL quick start's ``runs/safe`` run in tests/test_quick_start.py, after it
trains that run; every block of every page is run by one of the two or named here with why not
(slow, but the checker's own test)."""

import ast
import re
import shlex
import sys

import pytest
from doc_examples import (
    QUICK_START,
    ROOT,
    agrees,
    blocks,
    literal,
    masked,
    printed_output,
    run,
    run_command,
    transcripts,
)

from rcmdp_jax.study import cli, console

NOT_RUN = {("docs/cli.md", 1): "reads the event files with TensorBoard's own reader (the tensorboard package, "
           "not a test dependency); test_quick_start reads the same tags with tensorboardX's"}  # fmt: skip
SAME_AS = {("docs/design.md", 0): "tests/my_rule.py"}  # the page shows a file the plug-in tests load
RUN_HERE = {
    "README.md": (0, 1, 2),
    "docs/api.md": (1, 3),  # 0: README's first block's code
    "docs/custom_envs.md": (0, 1, 2, 3, 4, 5, 6),
    "docs/gymnax_envs.md": (0,),
    "docs/brax_envs.md": (0,),
    "docs/feasibility.md": (0,),
}


def pages() -> list[str]:
    return [p for p in ["README.md", *sorted(f"docs/{q.name}" for q in (ROOT / "docs").glob("*.md"))] if blocks(p)]


def test_every_example_is_run_somewhere():
    for page in pages():
        for i, source in enumerate(blocks(page)):
            where = (page, i)
            elsewhere = where in QUICK_START or where in NOT_RUN
            if where in SAME_AS:
                assert source == (ROOT / SAME_AS[where]).read_text(), f"{page}'s block {i} is not {SAME_AS[where]}"
            elif page == "docs/api.md" and i == 0:
                same = ast.dump(ast.parse(source)) == ast.dump(ast.parse(blocks("README.md")[0]))
                assert same, "api.md's first block is no longer README's code"
            else:
                assert elsewhere or i in RUN_HERE.get(page, ()), f"{page}'s block {i} is run by no test"


def test_the_checks_fail_on_a_page_that_no_longer_holds():
    assert literal("(10, 13), (10, 4)") == ("value", ((10, 13), (10, 4)))
    assert literal("('a', 'b'): as the report names them") == ("value", ("a", "b"))
    assert literal("a distrax distribution") is None and literal("(seed, level, direction)") is None
    assert agrees(((10, 13), (10, 4)), ((10, 13), (10, 4))) and not agrees(((10, 13), (10, 5)), ((10, 13), (10, 4)))
    assert agrees({"return": (1.5, 0.25)}, {"return": (39.7, 0.8)})  # the digits are the machine's
    assert not agrees({"return": (1.5, 0.25), "at_state_bound": (0.0, 0.0)}, {"return": (39.7, 0.8)})
    assert not agrees({"return": (float("nan"), 0.25)}, {"return": (39.7, 0.8)})
    assert masked(["  return   39.7018 ± 0.8180", "C |x|>0.3 at most 5/episode  -1.9e-3"]) == [
        "return # ± #", "C |x|># at most #/episode #"]  # fmt: skip
    # a seed's verdict is the machine's too; what it is kept against is the page's
    assert masked(["verdict C_1 kept (kept when C <= 0)"]) == masked(
        ["verdict C_1 too close to call (kept when C <= 0; 7 episodes decide)"]
    )
    assert masked(["verdict C_1 kept (kept when C <= 0)"]) != masked(["verdict C_1 kept (kept when EpCost <= 5)"])
    assert printed_output('print("x")\n# x\n#   y\n') == ["x", "  y"] and printed_output("x = 1\n# (1,)\n") is None
    with pytest.raises(AssertionError, match="prints"):
        run('print("return 1.5\\nverdict kept")\n# return 2.5\n', {}, "a page")
    with pytest.raises(AssertionError, match="against the page's"):
        run("(3, 4)   # (3, 5)\n", {}, "a page")


def tiny_run_args() -> list[str]:
    """docs/cli.md's ``runs/tiny`` command, as the page writes it."""
    text = (ROOT / "docs" / "cli.md").read_text()
    command = re.search(r"\(`runs/tiny`: `rcmdp ([^`]*)`", text).group(1)
    return shlex.split(command.replace("\n", " "))


def run_page(page: str, namespace: dict | None = None) -> dict:
    namespace = {} if namespace is None else namespace
    for i in RUN_HERE[page]:
        run(blocks(page)[i], namespace, f"{page}, block {i}")
    return namespace


@pytest.mark.slow
def test_readme_and_api_examples(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    readme = run_page("README.md")
    readme["make"]()  # README's my_env.py builds its environment
    argv = tiny_run_args()
    assert argv[argv.index("--out") + 1] == "runs/tiny"  # the folder the pages' examples read
    assert cli.main(argv) == 0
    run_page("docs/api.md")
    monkeypatch.setattr(sys, "argv", ["rcmdp"])  # the commands' name in their messages
    shown = transcripts("docs/cli.md", "rcmdp eval runs/tiny")
    assert len(shown) == 2, shown  # a result and a refusal
    for argv, lines in shown:
        run_command(argv, lines, console.main)


@pytest.mark.slow
def test_custom_envs_examples(tmp_path, monkeypatch):
    """The point mass of docs/custom_envs.md: ``my_env.py`` is its first two blocks (the page
    says so), then every block in order."""
    monkeypatch.chdir(tmp_path)
    page = blocks("docs/custom_envs.md")
    (tmp_path / "my_env.py").write_text(page[0] + "\n" + page[1])
    monkeypatch.syspath_prepend(str(tmp_path))
    run_page("docs/custom_envs.md")


@pytest.mark.slow
def test_gymnax_brax_and_feasibility_examples(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for page in ("docs/gymnax_envs.md", "docs/brax_envs.md", "docs/feasibility.md"):
        run_page(page)
