"""How the command line's path runs through the package's modules (a measure, not a test): the
main job traced with ``sys.setprofile`` from its arguments to the study's start (the training
itself left out unless ``--full``), its modules listed in the order it enters them (the
modules of ``study/``, and each library module one of them calls: what runs below that call
counts as that module), and the moves back into a module it had left (a return into it, or
a call back into it), each pair of modules counted once.

    python experiments/call_path.py [--full] [-v] [-- run.py's options]

Default options: ``--env cartpole --algos MDPO-Lag --seeds 1 --steps 64 --out TMP`` (a
temporary folder). ``-v`` prints every move back.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path


def _where(frame, library_too: bool) -> str | None:
    """The module the path is in at ``frame``: a module of ``study/``, or (``library_too``) the
    library module a module of ``study/`` called (what runs below it is that call's)."""
    library = None
    while frame is not None:
        name = frame.f_globals.get("__name__") or ""
        if name.startswith("rcmdp_jax.study"):
            return (library_too and library) or name
        if name.startswith("rcmdp_jax"):
            library = name
        frame = frame.f_back
    return library


def trace(argv: list[str], full: bool) -> tuple[list[str], list[str]]:
    """The modules the command runs in, one entry per change of module: of ``study/`` alone, and
    with the library modules they call (``_where``)."""
    from rcmdp_jax.study import cli, orchestrate

    if not full:
        orchestrate.Study.run = lambda self: 0  # the plan stage only
    paths: tuple[list[str], list[str]] = ([], [])

    def step(frame) -> None:
        for path, library_too in zip(paths, (False, True)):
            module = _where(frame, library_too)
            if module and module.startswith("rcmdp_jax") and (not path or path[-1] != module):
                path.append(module)

    def hook(frame, event, arg):
        if event == "call":
            step(frame)
        elif event == "return" and frame.f_back is not None:
            step(frame.f_back)

    sys.setprofile(hook)
    try:
        cli.main(argv)
    finally:
        sys.setprofile(None)
    return paths


def comebacks(path: list[str]) -> list[tuple[str, str]]:
    """Every move ``(from, to)`` into a module the path had left before."""
    seen, out = set(), []
    for a, b in zip(path, path[1:]):
        seen.add(a)
        if b in seen:
            out.append((a, b))
    return out


def main() -> None:
    args = sys.argv[1:]
    full, verbose = "--full" in args, "-v" in args
    rest = args[args.index("--") + 1 :] if "--" in args else []
    with tempfile.TemporaryDirectory() as tmp:
        argv = rest or ["--env", "cartpole", "--algos", "MDPO-Lag", "--seeds", "1", "--steps", "64",
                        "--plots", "off", "--out", str(Path(tmp) / "run")]  # fmt: skip
        paths = trace(argv, full)
    for what, path in zip(("study/ alone", "study/ and the library modules it calls"), paths):
        every = comebacks(path)
        back = list(dict.fromkeys(every))  # each pair once
        modules = list(dict.fromkeys(path))
        print(f"{what}: enters {len(modules)} modules, comes back to one it left {len(back)} times (distinct moves; "
              f"{len(every)} in all)")  # fmt: skip
        if verbose:
            print("  modules:", ", ".join(m.removeprefix("rcmdp_jax.") for m in modules))
            print("  back:", ", ".join(f"{a.removeprefix('rcmdp_jax.')} -> {b.removeprefix('rcmdp_jax.')}" for a, b in back))


if __name__ == "__main__":
    main()
