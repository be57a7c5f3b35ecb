"""The command line around the library (``rcmdp``, ``experiments/run.py``): a study planned, trained, tested
and reported into a run folder. Importing it imports none of its modules (``console`` splits the CPU first)."""
