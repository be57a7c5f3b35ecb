"""Rewrite a run folder's tables and plots from its saved results:

    python experiments/report.py RUN_DIR

(installed: ``rcmdp report RUN_DIR``; the logic is ``rcmdp_jax.study.console.report``)."""

from __future__ import annotations

import sys

from rcmdp_jax.study.console import report as main

if __name__ == "__main__":
    sys.exit(main())
