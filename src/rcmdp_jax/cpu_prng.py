"""Faster threefry on the CPU: the same random bits, lowered without a loop.

JAX lowers its ``threefry2x32`` primitive on the CPU as a rolled ``while`` loop
of 5 iterations (smaller programs), and on other backends as straight-line
code. Our train step draws keys and bits inside its innermost loops (every
environment step and minibatch step), and XLA's CPU runtime pays a fixed cost
per loop iteration and per kernel, so the rolled loop makes the fused train step
slower to run and to compile than the straight-line lowering (measured by
``experiments/bench_train.py``; figures in docs/performance.md).

``use_unrolled_threefry()`` registers JAX's own straight-line lowering for the
CPU platform. It is the identical algorithm on uint32 words, so every key and
every random number is bit-for-bit the same (``tests/test_cpu_prng.py``
checks this against the rolled lowering). It affects functions compiled after
the call, in this process, and it is a switch the caller turns on:
``import rcmdp_jax`` changes nothing global. The runner (``python
experiments/run.py``) and the benchmarks call ``apply_default()``; API users
who want the faster CPU code call ``rcmdp_jax.cpu_prng.use_unrolled_threefry()``
once before compiling (docs/api.md). If a future JAX moves these private names, it
does nothing and says so in its return value.
"""

from __future__ import annotations

import os


def _threefry_module():
    from jax._src.random import threefry2x32

    return threefry2x32


def use_unrolled_threefry() -> bool:
    """Lower threefry on the CPU as straight-line code; ``True`` if it took effect."""
    try:
        from jax._src.interpreters import mlir

        t = _threefry_module()
        mlir.register_lowering(t.threefry2x32_p, t._threefry2x32_lowering_rule, platform="cpu")
    except (ImportError, AttributeError):  # private JAX names moved: keep JAX's default
        return False
    return True


def use_rolled_threefry() -> bool:
    """Restore JAX's default CPU lowering (a rolled loop); ``True`` if it took effect."""
    try:
        from jax._src.interpreters import mlir

        t = _threefry_module()
        mlir.register_lowering(t.threefry2x32_p, t._threefry2x32_cpu_lowering_rule, platform="cpu")
    except (ImportError, AttributeError):
        return False
    return True


def apply_default() -> bool:
    """What the runner and the benchmarks do at start: unrolled unless the environment
    sets ``RCMDP_JAX_ROLLED_THREEFRY=1`` (then JAX's rolled loop, restored if it was
    changed); ``True`` if the unrolled lowering took effect."""
    if os.environ.get("RCMDP_JAX_ROLLED_THREEFRY", "0") == "1":
        use_rolled_threefry()
        return False
    return use_unrolled_threefry()


def lowering() -> str:
    """The CPU lowering of threefry compiled from now on: ``unrolled``, ``rolled`` or ``unknown``
    (part of a stored program's key, ``program_store``)."""
    try:
        from jax._src.interpreters import mlir

        t = _threefry_module()
        rule = mlir._platform_specific_lowerings["cpu"][t.threefry2x32_p].rule
    except (ImportError, AttributeError, KeyError):
        return "unknown"
    return {t._threefry2x32_lowering_rule: "unrolled", t._threefry2x32_cpu_lowering_rule: "rolled"}.get(rule, "unknown")
