"""The command line around the library (``rcmdp``, ``experiments/run.py``): a study here is
one run of it (plan, train, test, report into a run folder); "the reference study" is the
paper's experiments that the presets reproduce (docs/method.md). Its modules, by what they do:

* ``cli`` -- arguments and the sequence plan -> run folder -> devices -> study;
  ``UsageError`` and the one-line refusals (exit 2);
* ``plan`` / ``plan_user`` / ``sizes`` -- every input checked and every config built
  before anything is written; ``run_plan`` -- the plan (``Plan``, ``run.json``);
  ``saved_plan`` -- a saved ``run.json`` checked; ``user_env`` -- a user's ``--env
  MODULE:NAME`` or ``FILE.py:NAME``;
* ``run_folder`` -- the run folder's paths, readers and writers (shared with the report);
* ``compiled`` -- a family compiled ahead of time, its lanes over devices, the chunked loop;
* ``orchestrate`` -- train, restore, test, search and report, as named steps (``Study``);
* ``runtime`` -- processes, devices, compilation cache, Ctrl-C;
* ``report`` / ``report_text`` / ``worst_case_report`` / ``plots`` /
  ``aggregate`` / ``report_cli`` -- the tables and plots of a run folder;
* ``console`` -- the installed commands.

Importing the subpackage imports none of them (``console`` splits the CPU into devices
before JAX starts).
"""
