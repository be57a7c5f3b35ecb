"""A figure's layout (``fit``: every title, label and caption kept on the canvas) and
matplotlib's ``pyplot`` on a backend that draws to files (``pyplot``; ``save``): shared by the
feasibility check's figure (``feasibility_report.plot``) and the study's report
(``study.plots``). matplotlib is imported where used: an optional dependency."""

from __future__ import annotations

import textwrap
import warnings


def pyplot():
    """matplotlib's ``pyplot`` on the Agg backend (files only, no window)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _labels(fig) -> list:
    """The texts a layout can push past the canvas, each with the axes whose width it keeps
    to (an axes' titles, so that neighbours' titles do not meet) or None: the figure's title
    and captions, each axes' titles and axis labels."""
    out = [(t, None) for t in ([fig._suptitle] if fig._suptitle is not None else []) + list(fig.texts)]
    for ax in fig.axes:
        out += [(ax.title, ax), (ax._left_title, ax), (ax._right_title, ax), (ax.xaxis.label, None),
                (ax.yaxis.label, None)]  # fmt: skip
    return [(t, ax) for t, ax in out if t.get_visible() and t.get_text().strip()]


def _rewrap(text: str, chars: int) -> str:
    return "\n".join(textwrap.fill(line, max(chars, 8), break_on_hyphens=False) for line in text.split("\n"))


def fit(fig, rect=(0.0, 0.0, 1.0, 1.0), caption=None, tries: int = 8) -> None:
    """Lay ``fig`` out (``tight_layout`` within ``rect``) with every title, label and caption on
    the canvas: one that reaches past an edge is wrapped to the room its centre leaves it, then
    (too long a word) made smaller; ``caption`` (a ``fig.text`` at the bottom) gets the height
    it needs below the axes."""
    left, bottom, right, top = rect
    own: dict = {}  # each wrapped text as it was given: wrapped again from there, its own line breaks kept
    for _ in range(tries):
        renderer = fig.canvas.get_renderer()
        if caption is not None:
            needed = caption.get_window_extent(renderer).y1 / fig.bbox.height + 0.02
            bottom = max(rect[1], needed)
        with warnings.catch_warnings():  # "not compatible with tight_layout": the next round wraps
            warnings.simplefilter("ignore", UserWarning)
            fig.tight_layout(rect=(left, bottom, right, top))
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        W, H = fig.bbox.width, fig.bbox.height
        changed = False
        for t, ax in _labels(fig):
            b = t.get_window_extent(renderer)
            upright = abs(t.get_rotation() % 180 - 90) < 1
            lo, hi, size = (b.y0, b.y1, H) if upright else (b.x0, b.x1, W)
            wide = ax is not None and hi - lo > 1.1 * ax.get_window_extent(renderer).width
            if lo >= 0 and hi <= size and not wide:
                continue
            anchor = "center" if upright else t.get_horizontalalignment()  # the end that stays where it is
            centre = (lo + hi) / 2
            room = {"left": size - max(lo, 0), "right": min(hi, size)}.get(anchor, 2 * min(centre, size - centre))
            room = 0.96 * max(room, 0.1 * size)
            if ax is not None:
                room = min(room, 1.1 * ax.get_window_extent(renderer).width)
            longest = max(len(line) for line in t.get_text().split("\n"))
            chars = int(longest * room / (hi - lo))
            if chars >= 8 and chars < longest:
                t.set_text(_rewrap(own.setdefault(t, t.get_text()), chars))
            else:
                t.set_fontsize(t.get_fontsize() * 0.85)
            changed = True
        if not changed:
            return


def save(fig, path, caption=None) -> None:
    """``fig`` laid out (``fit``), written to ``path`` at 110 dpi and closed."""
    fit(fig, caption=caption)
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
