"""Running the Python examples of README.md and docs/ as the pages write them (not a test file;
tests/test_doc_examples.py and tests/test_quick_start.py use it).

What an example promises, checked on any machine: every block runs; a line ``EXPR  # LITERAL``
gives a value of the literal's structure (equal where the literal holds no float: shapes, names,
keys; a float is one machine's digits, so only a float); the comment lines that end a block which
prints are its output, compared line by line with every number masked."""

from __future__ import annotations

import ast
import contextlib
import io
import numbers
import re
import shlex
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# (page, block index): the blocks that read the quick start's ``runs/safe`` (test_quick_start runs them)
QUICK_START = {("docs/api.md", 2), ("docs/cli.md", 0)}
NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")
VERDICT = re.compile(r"\b(?:kept|broken|too close to call)( \(kept when [^;)]*)(?:; # episodes? decide)?\)")


def fenced(page: str) -> list[tuple[str, str]]:
    """The fenced blocks of ``page`` (a path from the repository's root) in order: ``(language, text)``."""
    found, language, lines = [], None, []
    for line in (ROOT / page).read_text().splitlines(keepends=True):
        if line.startswith("```") and language is None:
            language, lines = line[3:].strip(), []
        elif line.startswith("```"):
            found.append((language, "".join(lines)))
            language = None
        elif language is not None:
            lines.append(line)
    return found


def blocks(page: str) -> list[str]:
    """The ```python blocks of ``page``, in order."""
    return [text for language, text in fenced(page) if language == "python"]


def comments(source: str) -> dict[int, str]:
    """Line number (1-based) -> the text of the comment on that line."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {t.start[0]: t.string[1:].strip() for t in tokens if t.type == tokenize.COMMENT}


def literal(text: str):
    """The Python literal a comment starts with (``(10, 13), (10, 4)``; ``(...): words``), or
    ``None`` when it holds none."""
    for candidate in (text, text.split(": ")[0]):
        try:
            return ("value", ast.literal_eval(candidate))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def agrees(value, want) -> bool:
    """``value`` has ``want``'s structure: the same keys and lengths, equal ints, strings, bools and
    ``None``; where ``want`` has a float, any finite real number."""
    if isinstance(want, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    if isinstance(want, dict):
        return isinstance(value, dict) and set(value) == set(want) and all(agrees(value[k], w) for k, w in want.items())
    if isinstance(want, (tuple, list)):
        return (isinstance(value, (tuple, list)) and len(value) == len(want)
                and all(agrees(v, w) for v, w in zip(value, want)))  # fmt: skip
    if isinstance(want, bool):
        return type(value).__name__ in ("bool", "bool_") and bool(value) is want
    if want is None or isinstance(want, str):
        return type(value) is type(want) and value == want
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value == want


def masked(lines: list[str]) -> list[str]:
    """Each line with every number as ``#``, a seed's verdict (kept, broken, too close to call: the
    machine's, as its digits are) as ``<verdict>``, and runs of spaces as one."""
    return [" ".join(VERDICT.sub(r"<verdict>\1)", NUMBER.sub("#", line)).split()) for line in lines]


def printed_output(source: str) -> list[str] | None:
    """The comment lines that end a block which calls ``print``: the output the page shows."""
    if "print(" not in source:
        return None
    lines, tail = source.rstrip("\n").splitlines(), []
    while lines and lines[-1].startswith("#"):
        tail.insert(0, lines.pop()[1:].removeprefix(" "))
    return tail or None


def transcripts(page: str, prefix: str) -> list[tuple[list[str], list[str]]]:
    """The commands ``$ PREFIX ...`` of ``page``'s plain ``` blocks (a trailing ``\\`` joins
    lines), each with the lines the page shows after it: ``(argv without the program, lines)``."""
    found = []
    for block in (text for language, text in fenced(page) if not language):
        for part in re.split(r"^\$ ", block, flags=re.M)[1:]:
            command, *shown = re.sub(r"\\\n\s*", " ", part).rstrip("\n").splitlines()
            if command.startswith(prefix):
                found.append((shlex.split(command)[1:], shown))
    return found


def run_command(argv: list[str], shown: list[str], main) -> None:
    """``main(argv)`` (the console's), its stdout and stderr against the lines the page shows."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        main(argv)
    got = out.getvalue().rstrip("\n").splitlines()
    assert masked(got) == masked(shown), (
        f"rcmdp {shlex.join(argv)} prints\n" + "\n".join(got) + "\nthe page shows\n" + "\n".join(shown)
    )


def run(source: str, namespace: dict, where: str) -> str:
    """Execute one block statement by statement in ``namespace``; check each ``EXPR  # LITERAL``
    line and the block's printed output. Returns what it printed."""
    tree, notes, out = ast.parse(source), comments(source), io.StringIO()
    with contextlib.redirect_stdout(out):
        for stmt in tree.body:
            code = ast.Module(body=[stmt], type_ignores=[])
            found = literal(notes.get(stmt.end_lineno, "")) if isinstance(stmt, ast.Expr) else None
            if found is None:
                exec(compile(code, where, "exec"), namespace)
                continue
            value = eval(compile(ast.Expression(stmt.value), where, "eval"), namespace)
            assert agrees(value, found[1]), (
                f"{where}, line {stmt.end_lineno}: {value!r} against the page's {found[1]!r}"
            )
    shown = printed_output(source)
    if shown is not None:
        got = out.getvalue().rstrip("\n").splitlines()
        assert masked(got) == masked(shown), (
            f"{where} prints\n" + "\n".join(got) + "\nthe page shows\n" + "\n".join(shown)
        )
    return out.getvalue()
