"""How the monitor shares its height between the charts and the bottom panel (Qt-free).

Charts have priority. The bottom panel (ranks, logs, diagnosis...) takes a *share*
of the height, like VS Code's panel: the person sets it by dragging the divider,
it is remembered between sessions, and it is always clamped, so neither a saved
layout nor opening the Diagnosis tab can squeeze the charts unreadable. The panel
can also be *collapsed* (only its tab bar stays) or *maximised* (the charts give
way until it is restored).
"""

from __future__ import annotations

from dataclasses import dataclass

NORMAL, COLLAPSED, MAXIMISED = "normal", "collapsed", "maximised"
PANEL_MODES = (NORMAL, COLLAPSED, MAXIMISED)

DEFAULT_PANEL_SHARE = 0.34
MIN_PANEL_SHARE = 0.12
MAX_PANEL_SHARE = 0.55
MIN_CHARTS_PX = 230
"""The chart area never gets less than this while the panel is not maximised: the controls,
the legend and one row of charts."""


def clamp_share(share: float | None) -> float:
    """A panel share that keeps both parts usable (``None`` or nonsense: the default)."""
    if share is None or not isinstance(share, (int, float)) or share != share:  # NaN
        return DEFAULT_PANEL_SHARE
    return min(MAX_PANEL_SHARE, max(MIN_PANEL_SHARE, float(share)))


def share_of(charts_px: int, panel_px: int) -> float:
    """The share a divider position stands for (what is remembered when the person drags it)."""
    total = charts_px + panel_px
    return DEFAULT_PANEL_SHARE if total <= 0 else clamp_share(panel_px / total)


@dataclass(frozen=True)
class Split:
    charts: int
    panel: int


def split(total: int, share: float | None, mode: str = NORMAL, collapsed_panel_px: int = 28) -> Split:
    """Heights of the charts and the panel in ``total`` pixels.

    ``normal``: the panel gets ``share`` (clamped), but never so much that the charts
    get less than ``MIN_CHARTS_PX``; ``collapsed``: the panel keeps only its tab bar
    (``collapsed_panel_px``); ``maximised``: the panel takes everything.
    """
    total = max(0, int(total))
    if mode == MAXIMISED:
        return Split(0, total)
    if mode == COLLAPSED:
        panel = min(total, collapsed_panel_px)
        return Split(total - panel, panel)
    panel = round(total * clamp_share(share))
    if total - panel < MIN_CHARTS_PX:
        panel = max(0, total - MIN_CHARTS_PX) if total > MIN_CHARTS_PX else round(total * MIN_PANEL_SHARE)
    return Split(total - panel, panel)
