"""The brax GPU sweep's written rule (experiments/brax_gpu_sweep.py) on hand-made results: the
widest batch shape within 10 % of the best return among those keeping the constraint."""

import brax_gpu_sweep as sweep


def _row(shape, ret, kept):
    return {"shape": list(shape), "return": ret, "nominal_kept_every_seed": kept, "C_nominal": -1.0 if kept else 1.0}


def test_the_widest_shape_within_ten_percent_of_the_best_kept_one_is_chosen():
    a, b, c, d = sweep.SHAPES
    # best kept return 100 (b); c at 91 is within 10 %, d at 120 breaks the constraint
    rows = [_row(a, 80.0, True), _row(b, 100.0, True), _row(c, 91.0, True), _row(d, 120.0, False)]
    assert sweep.choose(rows)["shape"] == list(c)
    rows[2]["return"] = 89.0  # now outside 10 %: the best itself
    assert sweep.choose(rows)["shape"] == list(b)
    # a negative best (returns below zero): within 10 % of its size
    rows = [_row(a, -100.0, True), _row(b, -109.0, True), _row(c, -111.0, True)]
    assert sweep.choose(rows)["shape"] == list(b)


def test_no_shape_keeping_the_constraint_falls_back_to_the_presets_shape():
    rows = [_row(s, 10.0 * i, False) for i, s in enumerate(sweep.SHAPES)]
    assert sweep.choose(rows)["shape"] == list(sweep.SHAPES[0])
    assert sweep.SHAPES[0] == (4, 400, 32)  # the presets' own (envs.LearnerSpec's defaults)
    assert sweep.shape_args((8, 16, 32)) == ["--set", "n_envs=8", "--set", "n_steps=16", "--set", "minibatch_size=32"]
