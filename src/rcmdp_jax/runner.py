"""The main job, importable and testable: ``rcmdp_jax.runner.main(argv)`` is what
``experiments/run.py`` calls. The job lives in rooms named by what they do:

* ``cli`` -- arguments and the sequence plan -> run folder -> devices -> study;
* ``plan`` -- every input checked and every config built before anything is written;
* ``run_folder`` -- the run folder's paths, readers and writers (shared with the report);
* ``compiled`` -- a family compiled ahead of time, its lanes over devices, the chunked loop;
* ``study`` -- train, restore, test, search and report, as named steps;
* ``runtime`` -- processes, devices, compilation cache, Ctrl-C.
"""

from rcmdp_jax.cli import main, parse_args  # noqa: F401
from rcmdp_jax.compiled import Prepared, chunk_size, train_prepared  # noqa: F401
from rcmdp_jax.plan import UsageError, build_plan  # noqa: F401
from rcmdp_jax.study import Study  # noqa: F401
