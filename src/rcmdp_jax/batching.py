"""Work only some lanes of a vmapped batch do.

Under ``jax.vmap`` a ``lax.cond`` whose predicate differs between lanes runs both
branches for every lane and selects. In a family (``rcmdp_jax.family``) that made
the non-robust members pay for LTMA, the most sequential phase on the inventories.
``only_where(fn, otherwise)`` is ``fn(*args) if flag else otherwise(*args)`` whose
batching rule (``jax.custom_batching.custom_vmap``) runs ``fn`` only on the lanes
that need it: none when none is flagged; else the flagged lanes are moved to the
front (a stable sort), cut into chunks of at most ``chunk`` lanes, and a ``lax.map``
over the chunks runs ``fn`` vmapped on a chunk only when some lane of it is flagged
(a ``lax.cond`` that is not batched there, so it really skips). ``fn`` appears once
in the program, so a family compiles each robust method's phase once. Every lane
gets what the plain ``lax.cond`` gives it, computed on a narrower batch (float
rounding aside).

Under nested vmaps the inner one uses the rule and the outer ones batch it like
any program (correct, without the saving). ``fn`` must not be differentiated
through (``custom_vmap`` has no reverse mode).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap
from jax.extend.core import jaxpr_as_fun


def only_where(fn: Callable, otherwise: Callable, chunk: int = 8) -> Callable:
    """``g(flag, *args)``: ``fn(*args)`` where ``flag`` else ``otherwise(*args)`` (both
    return the same structure); vmapped, ``fn`` runs on the chunks of ``chunk`` lanes
    holding flagged lanes only. Every argument must be passed explicitly (no
    closed-over traced values)."""
    fn = traced_once(fn)

    @custom_vmap
    def g(flag, *args):
        return jax.lax.cond(flag, fn, otherwise, *args)

    @traced_once
    def lanes(flag, args):  # every argument batched: [lanes, ...]
        axis_size = flag.shape[0]
        n_chunks = -(-axis_size // chunk)
        size = -(-axis_size // n_chunks)  # chunks of at most `chunk` lanes, padded by < n_chunks

        def some(flag, args):
            pick = lambda y, n: jnp.where(jnp.reshape(flag, (-1,) + (1,) * (y.ndim - 1)), y, n)
            return jax.tree.map(pick, jax.vmap(fn)(*args), jax.vmap(otherwise)(*args))

        def by_chunks(flag, args):
            order = jnp.argsort(jnp.logical_not(flag), stable=True)  # flagged lanes first
            order = jnp.concatenate([order, jnp.full((n_chunks * size - axis_size,), order[-1])])
            chunks = jax.tree.map(lambda x: x[order].reshape((n_chunks, size) + x.shape[1:]), (flag, args))
            run = lambda c: jax.lax.cond(jnp.any(c[0]), some, lambda _, a: jax.vmap(otherwise)(*a), *c)
            out = jax.lax.map(run, chunks)
            inverse = jnp.argsort(order[:axis_size])
            return jax.tree.map(lambda y: y.reshape((n_chunks * size,) + y.shape[2:])[inverse], out)

        # the chunked path serves every lane flagged too; none flagged: ``otherwise`` alone
        none = lambda flag, args: jax.vmap(otherwise)(*args)
        return jax.lax.cond(jnp.any(flag), by_chunks, none, flag, args)

    @g.def_vmap
    def rule(axis_size, in_batched, flag, *args):
        def batched(x, b):
            return x if b else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))

        out = lanes(batched(flag, in_batched[0]), jax.tree.map(batched, args, tuple(in_batched[1:])))
        return out, jax.tree.map(lambda _: True, out)

    return g


def traced_once(fn: Callable) -> Callable:
    """``fn`` traced once per argument shapes, then replayed from its jaxpr: the same program.
    ``only_where``'s primal traces ``fn``, and its batching rule runs again each time an
    enclosing ``scan`` or ``cond`` batches its body (a fixed point over what is batched): each
    of those traced all of ``fn`` (a robust method's phase: a third of a family's tracing)."""
    traces = {}

    def replay(*args):
        leaves, tree = jax.tree.flatten(args)
        key = (tree, tuple(jax.typeof(x) for x in leaves))
        if key in traces:
            closed, out_tree = traces[key]
        else:
            closed, out = jax.make_jaxpr(fn, return_shape=True)(*args)
            out_tree = jax.tree.structure(out)
            if not any(isinstance(c, jax.core.Tracer) for c in closed.consts):  # else closed over a trace: not kept
                traces[key] = closed, out_tree
        return jax.tree.unflatten(out_tree, jaxpr_as_fun(closed)(*leaves))

    return replay
