"""What a run says on stdout before it trains, once its plan and folder are settled: unused
options, margins and robust methods, what runs where, costs no policy changes."""

from __future__ import annotations

import jax

from rcmdp_jax import envs, options
from rcmdp_jax.cost_check import cannot_bind
from rcmdp_jax.plugin import option_owners, options_of
from rcmdp_jax.presets import parse_setting
from rcmdp_jax.program_store import remembered


def _grouped(pairs) -> dict:
    """``{key: [name, ...]}`` of ``(key, name)`` pairs, in order."""
    out: dict = {}
    for key, name in pairs:
        out.setdefault(key, []).append(name)
    return out


def unused_options(overrides, configs) -> list[str]:
    """A note for each plug-in option or number that ``--set`` or a name sets and nothing reads."""
    owners, used = option_owners(), {o for c in configs for cls in options.used(c) for o in options_of(cls)}
    reads, numbers = {id(c): options.numbers_read(c) for c in configs}, options.declared_numbers()
    notes = [f"note: --set {k}: no algorithm of this run uses it (an option of {owners[k][0]}); it has no effect"
             for k in overrides if k in owners and k not in used]  # fmt: skip
    notes += [f"note: --set {k}: no algorithm of this run trains with {k.split('.')[0]}; it has no effect"
              for k in overrides if k in numbers and not any(k in r for r in reads.values())]  # fmt: skip
    notes += [f"note: {c.name}: {k}: {c.name} does not train with {k.split('.')[0]}; it has no effect"
              for c in configs for k in c.hparams.plugin_names
              if k not in overrides and k not in reads[id(c)]]  # fmt: skip
    return list(dict.fromkeys(notes))


def margin_notes(configs) -> list[str]:
    """The safety margin each algorithm trains with, where it is not 0."""
    fixed = _grouped((float(c.hparams.cost_margin), c.name) for c in configs if float(c.hparams.cost_margin))
    data = _grouped(((float(c.hparams.margin_z), float(c.hparams.margin_n)), c.name) for c in configs
                    if float(c.hparams.margin_z) and c.constrained)  # fmt: skip
    notes = [f"rcmdp_jax: {', '.join(names)} train(s) to C <= -{m:g} (cost_margin, a safety margin below the limit; "
             "--set cost_margin=0 trains to the limit itself)" for m, names in fixed.items()]  # fmt: skip
    return notes + [f"rcmdp_jax: {', '.join(names)} train(s) to C <= -{z:g} sigma_j / sqrt({n:g}) on each constraint "
                    f"j, sigma_j the spread of C its own dual episodes show (the data margin, margin_z={z:g}, margin_n="
                    f"{n:g}: the test's episodes per kernel; --set margin_z=0 trains to the limit itself)"
                    for (z, n), names in data.items()]  # fmt: skip


def robust_notes(configs) -> list[str]:
    """The robust method a ``-Robust`` name trains under per environment; LTMA's guarded reading."""
    by = _grouped(((c.env, c.adversary), c.name) for c in configs if c.robust and "+" not in c.name)
    guarded = _grouped((c.env, c.name) for c in configs if c.adversary == "ltma" and envs.split_limit(c.env)
                       and c.option("ltma_dual_reading") == "guarded")  # fmt: skip
    notes = [f"rcmdp_jax: on {env}, {', '.join(names)} train(s) under the robust method {method!r} (-Robust's there; "
             "ALGO+METHOD names another)" for (env, method), names in by.items()]  # fmt: skip
    return notes + [f"rcmdp_jax: on {env} (not the study's limit), {', '.join(names)} read C^ on LTMA's guarded kernel "
                    "(the study's reading, --set ltma_dual_reading=found, broke the constraint at the nominal kernel "
                    "in more seeds than plain -Lag there: docs/robustness_findings.md)"
                    for env, names in guarded.items()]  # fmt: skip


def say_before_training(args, plan, folder, mesh, first: bool, split_note: str) -> None:
    """Print the lines, each as it comes (the check of the costs takes a while)."""
    every = [c for cfgs in plan.configs.values() for c in cfgs.values()]
    given = [parse_setting(s)[0] for s in args.sets]  # checked by the plan (``plan.parse_sets``)
    lines = [split_note] + unused_options(given, every) + margin_notes(every) + robust_notes(every)
    lines += [args.event_note if not args.eval_only else ""]
    where = f", sharded over {mesh.size} {mesh.devices.flat[0].platform.upper()} devices" if mesh is not None else ""
    if args.distributed:
        where += f"; process {jax.process_index()} of {jax.process_count()}"
    lines.append(f"rcmdp_jax: {len(plan.envs) * len(plan.algos)} algorithm run(s) x {plan.seeds} seed(s) "
                 f"({'vmapped' if plan.vmap else 'loop over seeds'}{where}) -> {folder.root}")  # fmt: skip
    for line in filter(None, lines):
        print(line, flush=True)
    if first and not args.eval_only and not args.resume:  # a cost no policy changes: said before training
        for name in plan.envs:  # a built-in environment's verdict is kept for the next run (program_store)
            check = lambda name=name: cannot_bind(name)  # noqa: E731
            for line in check() if envs.registered_spec(name) else remembered("cannot_bind", name, check):
                print(f"rcmdp_jax: warning: {line}", flush=True)
    for name in unsaved(plan.envs, plan.env_sources):
        print(f"rcmdp_jax: note: {name!r} was registered by this script; `rcmdp report` and --eval-only from a shell "
              "cannot rebuild it (re-read the folder from a script that registers it: "
              "rcmdp_jax.study.console.report([RUN_DIR]); or train with --env FILE.py:NAME)", flush=True)  # fmt: skip


def unsaved(names, saved: dict) -> list[str]:
    """The names this process registered that a fresh one cannot rebuild (not in ``saved``)."""
    return [n for n in names if n in envs.registered() and n not in saved]
