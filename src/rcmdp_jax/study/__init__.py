"""The command line around the library (``rcmdp``, ``experiments/run.py``): a study is one run
of it, planned, trained, tested and reported into a run folder (docs/design.md's module map).
Importing the subpackage imports none of its modules (``console`` splits the CPU into devices
before JAX starts)."""
