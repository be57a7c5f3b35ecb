"""The held-out benchmark's draw (experiments/heldout.py, docs/heldout.md): deterministic, the one
committed before its results, every setting a valid environment name, the verdict's counts."""

import json
from pathlib import Path

import numpy as np
from heldout import DEVELOPMENT, POOL, WIDTHS, draw, env_name, verdicts

from rcmdp_jax import envs

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_draw_is_deterministic_and_the_committed_one():
    a, b = draw(), draw()
    assert a == b
    assert a == json.loads((DOCS / "heldout_settings.json").read_text())
    assert draw(seed=62) != a


def test_every_drawn_setting_follows_the_rule_and_is_an_environment():
    settings = draw()
    assert len({json.dumps(s, sort_keys=True) for s in settings}) == len(settings)
    assert [s["set"] for s in settings] == ["development" if s["index"] in DEVELOPMENT else "held-out" for s in settings]
    for s in settings:
        fields, costs = POOL[s["env"]]
        assert set(s["uncertain"]) <= set(fields) and 1 <= len(s["uncertain"]) <= 3
        assert all(w in WIDTHS for w in s["uncertain"].values())
        low, high = costs[s["field"]]
        assert low * 0.999 <= s["limit"] <= high * 1.001
        envs.check_name(env_name(s))


def test_verdict_counts_on_hand_made_seeds():
    C = np.array([m + np.array([1.0, -1.0, 1.0, -1.0]) for m in (-2.0, -0.5, 0.0, 0.6, 3.0)])
    se = np.std([1, -1, 1, -1], ddof=1) / 2  # episodes +-1 around each seed's mean: 0.577
    kept, close, broken = verdicts(C)
    assert (kept, close, broken) == (1, 3, 1)  # -2 < -2 se; |-0.5|, 0, 0.6 within 2 se = 1.155; 3 beyond
    assert 2 * se > 0.6
