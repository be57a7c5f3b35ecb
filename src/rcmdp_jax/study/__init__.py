"""The command line around the library (``rcmdp``, ``experiments/run.py``): a study here is
one run of it (plan, train, test, report into a run folder); "the reference study" is the
paper's experiments that the presets reproduce (docs/method.md). Its modules by job (each in
docs/design.md's module map): the command line (``console``, ``cli``, ``feasibility_command``),
the plan (``plan``, ``notes``, ``run_plan``, ``user_code``), the run (``orchestrate``,
``training_log``, ``compiled``, ``program_store``, ``executables``, ``runtime``,
``run_folder``, ``policy``) and the report (``report``, ``plots``).

Importing the subpackage imports none of them (``console`` splits the CPU into devices
before JAX starts).
"""
