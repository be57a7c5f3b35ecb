"""Run by ``test_program_store.py`` in a new process: one tiny family trained by the study's
runner (``Prepared``, ``train_prepared``) on 2 forced host devices, its programs kept in the
program store ``STORE`` (or none: ``off``). Writes its metrics and final parameters to ``OUT``
(npz) and prints ``RESULT <json>``: whether its programs were loaded, what it said, how often
the family was built (``make_family``: traced) and the store's counts.

    python program_store_script.py STORE|off OUT LR_SCALE [ENV]"""

import json
import os
import sys

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402

from rcmdp_jax import family, preset  # noqa: E402
from rcmdp_jax.sharding import local_mesh  # noqa: E402
from rcmdp_jax import program_store  # noqa: E402
from rcmdp_jax.chunked import Prepared, train_prepared  # noqa: E402

store, out, lr_scale = sys.argv[1], sys.argv[2], float(sys.argv[3])
env = sys.argv[4] if len(sys.argv) > 4 else "cartpole"
program_store.configure(None if store == "off" else store)
built = []
make_family = family.make_family
family.make_family = lambda cfgs: built.append(1) or make_family(cfgs)  # counts the family's traces
cfgs = []
for algo in ("PPO-Lag", "PPO-Robust-Lag"):
    cfg = preset(env, algo, total_timesteps=64 * 3, n_steps=16, minibatch_size=16, epochs=2,
                 eval_episodes=2, n_dual_episodes=2, dual_batch=32)  # fmt: skip
    cfgs.append(cfg.replace(lr=cfg.hparams.lr * lr_scale))
keys = np.asarray(jax.random.split(jax.random.PRNGKey(3), 3))
prep = Prepared(cfgs, keys, True, local_mesh(2))
per_member, _ = train_prepared(prep, "family")
arrays = {}
for i, result in enumerate(per_member):
    for name, x in result.metrics.items():
        arrays[f"{i}/{name}"] = np.asarray(x)
    for j, leaf in enumerate(jax.tree.leaves(result.state.params)):
        arrays[f"{i}/param{j}"] = np.asarray(leaf)
np.savez(out, **arrays)
print("RESULT " + json.dumps({"loaded": prep.loaded, "note": prep.store_note, "built": len(built),
                              "counts": program_store.counts}))  # fmt: skip
