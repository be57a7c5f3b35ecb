"""Every figure the report and the feasibility check draw keeps its text on the canvas:
each saved figure's text boxes (titles, axis labels, tick labels, legends, captions),
measured by matplotlib's renderer at save time, lie inside the figure's own box. Made-up
results with the longest names a run gives (a gymnax name with its box and costs, the 14
algorithms, kernels named by their fields)."""

from unittest import mock

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from rcmdp_jax.presets import ALGORITHMS  # noqa: E402

ENV = "gymnax:Pendulum-v1@uncertain=g:0.2,m:0.2,l:0.2@costs=speed,torque"
COSTS = ("angular speed under 1.5 rad/s: |theta_dot| - 1.5", "mean squared torque under 1 (N m)^2: u^2 - 1")
KERNEL = "level 1, g +20 %, m +20 %, l +20 %, pole angular velocity -5 %"


def outside(fig, dpi: int = 110) -> list[str]:
    """The visible, non-empty texts of ``fig`` whose drawn box leaves the canvas (by more than
    half a pixel) at the report's ``dpi``, as ``'text' [x0, y0, x1, y1] of W x H``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    drawn, draw = [], Text.draw

    def recorded(self, renderer):  # the texts the renderer draws (not the tick labels outside the view)
        draw(self, renderer)
        if self.get_visible() and self.get_text().strip():
            drawn.append(self)

    fig.set_dpi(dpi)
    canvas = FigureCanvasAgg(fig)  # a closed figure has lost its pyplot canvas
    with mock.patch.object(Text, "draw", recorded):
        canvas.draw()
    renderer = canvas.get_renderer()
    W, H = fig.bbox.width, fig.bbox.height
    out = []
    for t in drawn:
        b = t.get_window_extent(renderer)
        if b.x0 < -0.5 or b.y0 < -0.5 or b.x1 > W + 0.5 or b.y1 > H + 0.5:
            out.append(f"{t.get_text()!r} [{b.x0:.0f}, {b.y0:.0f}, {b.x1:.0f}, {b.y1:.0f}] of {W:.0f} x {H:.0f}")
    return out


@pytest.fixture
def saved(monkeypatch):
    """The figures saved while a test runs (drawn, not written), with what each was saved as."""
    import matplotlib.figure

    figures = {}
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, path, *a, **k: figures.update({str(path): self}))
    return figures


def test_the_finder_sees_a_title_cut_at_the_edge(saved):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.set_title("a title far wider than a figure three inches wide can show at this size")
    fig.tight_layout()
    assert [x for x in outside(fig) if "a title far wider" in x]
    ax.set_title("short")
    fig.tight_layout()
    assert outside(fig) == []
    plt.close(fig)


def test_the_reports_figures_keep_their_text_on_the_canvas(tmp_path, saved):
    from rcmdp_jax.study import plots, report

    rng = np.random.default_rng(0)
    levels = np.linspace(0, 1, 11)
    results = {a: (rng.normal(size=(3, 11, 8, 4)), rng.normal(size=(3, 11, 8, 4, 2))) for a in ALGORITHMS}
    worst = {j: {a: KERNEL for a in list(ALGORITHMS)[:k]} for j, k in ((0, 3), (1, 14))}
    plots.plot_robustness(tmp_path, results, levels, ENV, COSTS, worst)
    metrics = {a: {"policy_steps": np.tile(np.arange(10.0), (3, 1)), "eval_return": rng.normal(size=(3, 10)),
                   "eval_costs": rng.normal(size=(3, 10, 2)), "lam": rng.random((3, 10, 2)),
                   "xi": rng.normal(size=(3, 10, 3))} for a in ALGORITHMS}  # fmt: skip
    plots.plot_training(tmp_path, metrics, np.zeros(3), np.ones(3), ENV, list(COSTS))
    if report.installed("rliable.library"):
        report.aggregate_section(results, 50.0, ENV, tmp_path)
    names = {p.rsplit("/", 1)[-1] for p in saved}
    assert {"test_return.png", "test_cost_1.png", "test_cost_2.png", "train_curves.png"} <= names
    assert not report.installed("rliable.library") or {"intervals.png", "profiles.png"} <= names
    cut = {p.rsplit("/", 1)[-1]: outside(fig) for p, fig in saved.items()}
    assert all(not v for v in cut.values()), {k: v for k, v in cut.items() if v}


@pytest.mark.parametrize("m", [1, 2])
def test_the_feasibility_figure_keeps_its_text_on_the_canvas(tmp_path, saved, m):
    from rcmdp_jax.feasibility_report import plot

    rows = [{"constraint": COSTS[j], "keepable": bool(j), "margin": 0.5 * j, "least_C_per_level": list(np.linspace(-1, 2, 11)),
             "least_C_per_level_se": [0.1] * 11} for j in range(m)]  # fmt: skip
    plot({"env": ENV, "levels": list(np.linspace(0, 1, 11)), "constraints": rows}, tmp_path / "feasibility.png")
    (fig,) = saved.values()
    assert outside(fig) == []
