"""The CPU split into one XLA device per core for a study started in this process
(``split_in_process``: the command line and ``console.split_cpu`` call it)."""

from __future__ import annotations

_SAID: list[bool] = []


def split_in_process(devices: str, seeds: int) -> str:
    """For ``rcmdp_jax.study.cli.main`` called from a user's script: split the CPU into one
    device per core (``--devices auto``) unless JAX already started; then, once per
    process, the one line that says why the seeds run on fewer devices and how to get
    them all ("" when there is nothing to say)."""
    import os

    from rcmdp_jax import sharding

    cores = sharding.available_cores()
    if devices != "auto" or cores < 2 or "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return ""
    if sharding.split_cpu(cores) or _SAID:
        return ""
    import jax

    have = jax.local_device_count()
    if jax.default_backend() != "cpu" or have >= cores or seeds < 2:
        return ""
    _SAID.append(True)
    return (f"rcmdp_jax: note: JAX started in this process before rcmdp_jax could split the CPU, so the seeds "
            f"run on {have} device(s), not {cores}; call rcmdp_jax.study.console.split_cpu() before any JAX work "
            f"and before importing gymnax, or set XLA_FLAGS=--xla_force_host_platform_device_count={cores}")  # fmt: skip
