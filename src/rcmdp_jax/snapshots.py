"""A family's training, written down mid-run and continued (``chunked.train_prepared``'s
``snapshot``): the state before an iteration and the metrics so far, in one ``.npz`` keyed on what
the family's training is. A run stopped mid-family (Ctrl-C, a killed session, a full disk) goes on
from its last snapshot and trains the numbers an uninterrupted run trains, bit for bit."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np

EVERY_S = 600.0  # how often a family in training writes where it is
FILE = "training_snapshot.npz"  # the study's runner: in the family's first member's folder


def fingerprint(prep) -> str:
    """What a family's training is (SHA-256): its configurations (structure and numbers), the seeds'
    keys, the chunk and the devices its lanes are laid out on."""
    devices = None if prep.mesh is None else [d.id for d in prep.mesh.devices.flat]
    text = repr((prep.cfgs, prep.n_iter, prep.chunk, prep.keys.shape, str(prep.keys.dtype), devices))
    return hashlib.sha256(text.encode() + prep.keys.tobytes()).hexdigest()


def write(path, prep, state, start: int, metrics: dict) -> None:
    """The family's ``state`` before iteration ``start`` and its metrics so far (a dict of
    ``[lanes, iterations, ...]`` arrays), to ``path`` whole or not at all."""
    import jax

    from rcmdp_jax import atomic

    arrays = {f"state_{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(state))}
    arrays.update({f"metric_{k}": np.asarray(v) for k, v in metrics.items()})
    buffer, path = io.BytesIO(), Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(buffer, fingerprint=np.array(fingerprint(prep)), start=np.int64(start), **arrays)
    atomic.write_bytes(path, buffer.getvalue())


def read(path, prep, template, label: str | None):
    """``(state, start, metrics)`` from the snapshot at ``path``, the state laid out as
    ``template`` (the family's initial state) is; None when there is none or it is another
    family's or unreadable (then said)."""
    import jax

    path = Path(path)
    if not path.exists():
        return None
    say = lambda why: print(f"{label or 'training'} {why}; training the family from the start", flush=True)
    try:
        with np.load(path) as z:
            if str(z["fingerprint"]) != fingerprint(prep):
                return say(f"the snapshot {path} is of another family (other options, seeds or devices)")
            leaves, tree = jax.tree.flatten(template)
            state = [jax.device_put(z[f"state_{i}"], getattr(x, "sharding", None)) for i, x in enumerate(leaves)]
            if any(a.shape != x.shape or a.dtype != x.dtype for a, x in zip(state, leaves)):
                return say(f"the snapshot {path} does not fit this family's state")
            metrics = {k.removeprefix("metric_"): z[k] for k in z.files if k.startswith("metric_")}
            start = int(z["start"])
    except (OSError, ValueError, KeyError, EOFError) as err:
        return say(f"the snapshot {path} could not be read ({type(err).__name__})")
    if label is not None:
        print(f"{label} continuing from iteration {start} of {prep.n_iter} (snapshot {path.name})", flush=True)
    return jax.tree.unflatten(tree, state), start, metrics
