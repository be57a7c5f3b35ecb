"""The command line around the library (``rcmdp``, ``experiments/run.py``): a study here is
one run of it (plan, train, test, report into a run folder); "the reference study" is the
paper's experiments that the presets reproduce (docs/method.md). Its modules, by job:

* command line -- ``console``: the one entry point, every installed command dispatched from
  it (``rcmdp``, ``rcmdp report``, ``rcmdp eval``, ``rcmdp feasibility``, ``rcmdp-report``),
  with the report, eval and feasibility commands; ``cli``: the main job's arguments and the
  sequence plan -> run folder -> devices -> study, ``UsageError`` and the one-line refusals
  (exit 2);
* plan -- ``plan``: every input checked and every config built before anything is written;
  ``run_plan``: the plan (``Plan``, ``run.json``), a saved ``run.json`` checked, the sizes
  (counts and memory), and ``PlanError``, ``RunFolderError``; ``user_code``: a user's
  ``--env MODULE:NAME`` / ``FILE.py:NAME`` and ``--plugins`` files, recorded and loaded again;
* run -- ``orchestrate``: train, restore, test, search and report, as named steps
  (``Study``), and the training log (CSV and TensorBoard metrics, ``TrainingLog``);
  ``compiled``: a family compiled ahead of time, its lanes over devices, the chunked loop,
  and the compiled programs kept for the process; ``runtime``: processes, devices and the
  CPU split, compilation cache, Ctrl-C; ``run_folder``: the run folder's paths, readers,
  writers and lock (shared with the report); ``policy``: a trained policy read back;
* report -- ``report``: the tables of a run folder and its ``summary.md``, with the
  summary's sections in words (legend, constraints, worst case, rliable statistics);
  ``plots``: every figure.

Importing the subpackage imports none of them (``console`` splits the CPU into devices
before JAX starts).
"""
