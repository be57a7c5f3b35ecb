"""The command line around the library (``rcmdp``, ``experiments/run.py``): a study here is
one run of it (plan, train, test, report into a run folder); "the reference study" is the
paper's experiments that the presets reproduce (docs/method.md). Its modules, by job:

* command line -- ``console``: the one entry point, every installed command dispatched from
  it (``rcmdp``, ``rcmdp report``, ``rcmdp eval``, ``rcmdp feasibility``, ``rcmdp-report``),
  with the report and eval commands; ``cli``: the main job's arguments and the sequence
  plan -> run folder -> devices -> study, ``UsageError`` and the one-line refusals (exit 2);
  ``feasibility_cli``: ``rcmdp feasibility``; ``errors``: ``PlanError``, ``RunFolderError``;
* plan -- ``plan``: every input checked and every config built before anything is written;
  ``sizes``: counts and memory; ``run_plan``: the plan (``Plan``, ``run.json``) and a saved
  ``run.json`` checked; ``user_code``: a user's ``--env MODULE:NAME`` / ``FILE.py:NAME`` and
  ``--plugins`` files, recorded and loaded again;
* run -- ``orchestrate``: train, restore, test, search and report, as named steps
  (``Study``); ``compiled``: a family compiled ahead of time, its lanes over devices, the
  chunked loop; ``programs``: compiled programs kept for the process; ``runtime``:
  processes, devices and the CPU split, compilation cache, Ctrl-C; ``run_folder``: the run
  folder's paths, readers, writers and lock (shared with the report); ``training_log``:
  the CSV and TensorBoard metrics; ``policy``: a trained policy read back;
* report -- ``report``: the tables of a run folder and its ``summary.md``;
  ``report_sections``: the summary's sections in words (legend, constraints, worst case,
  rliable statistics); ``plots``: every figure.

Importing the subpackage imports none of them (``console`` splits the CPU into devices
before JAX starts).
"""
