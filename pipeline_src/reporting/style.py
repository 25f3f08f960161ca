"""How the report shows methods and numbers: one colour-blind-safe colour and a marker per method, kept across
every plot, the marker saying the family; table formatting for people. Imported by the report notebook (which reads only results)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..heads.families import FAMILIES
from ..heads.options import head_families

FAMILY_OF = head_families()  # every registered head type has its family (declared where it is registered)
FAMILY_MARKER = dict(zip(FAMILIES, ["o", "s", "^", "D", "P"]))
MARKERS = ["o", "s", "^", "D", "P", "v", "X", "*", "<", ">"]  # for a clash of (colour, marker), and one-family runs
# Petroff (2021), "Accessible color sequences for data visualization" (matplotlib's `petroff10`): ten colours
# chosen to stay apart under the common colour-vision deficiencies; an eleventh method reuses a colour with
# another marker
PALETTE = "petroff10"


def family(method_type: str) -> str:
    return FAMILY_OF.get(method_type, "other")


def method_styles(methods: dict[str, str], together: list[set[str]] | None = None) -> dict[str, dict]:
    """``{method name: head type}`` -> ``{method: {"color", "marker", "family"}}``. Each method of a run gets its
    own colour of a colour-blind-safe palette, in the order of the families, then head type, then name (so a
    family's methods sit together in every legend), and its family's marker (every method its own marker when
    the run has one family: variants of one head). With more methods than colours, a colour is reused only by
    methods never drawn together (``together``: the sets of methods sharing a figure, a run's datasets), and
    then with another marker: no two methods share a (colour, marker) pair, the same names get the same style."""
    import matplotlib

    colors = [matplotlib.colors.to_hex(c) for c in matplotlib.color_sequences[PALETTE]]
    rank = {f: i for i, f in enumerate(FAMILIES)}
    order = sorted(methods, key=lambda m: (rank.get(family(methods[m]), len(rank)), methods[m], m))
    one_family = len({family(t) for t in methods.values()}) == 1 and len(methods) > 1
    beside = {m: set().union(*[g for g in (together or []) if m in g]) - {m} for m in order}
    styles, used, count = {}, set(), dict.fromkeys(colors, 0)
    for i, m in enumerate(order):
        f = family(methods[m])
        taken = {styles[o]["color"] for o in beside[m] if o in styles}
        free = [c for c in colors if c not in taken] or colors  # least used first, among those free beside it
        color = min(free, key=lambda c: (count[c], colors.index(c)))
        count[color] += 1
        marker = MARKERS[i % len(MARKERS)] if one_family else FAMILY_MARKER.get(f, "X")
        k = MARKERS.index(marker) if marker in MARKERS else 0
        while (color, marker) in used:  # a reused colour: the next marker
            k += 1
            marker = MARKERS[k % len(MARKERS)]
        used.add((color, marker))
        styles[m] = {"color": color, "marker": marker, "family": f}
    return styles


def family_legend(ax, styles: dict[str, dict], shown: list[str], **extra) -> None:
    """A legend for what the markers say (a method's family), for figures whose y axis already names each
    method; ``extra`` adds ``{label: Line2D kwargs}`` entries (an interval, a line drawn at the edge)."""
    from matplotlib.lines import Line2D

    families = list(dict.fromkeys(styles[m]["family"] for m in shown))
    marks = dict.fromkeys(styles[m]["marker"] for m in shown)
    if len(marks) != len(families):  # markers are per method here (one family, or a clash): nothing to say
        families = []
    handles = [Line2D([], [], marker=styles[next(m for m in shown if styles[m]["family"] == f)]["marker"],
                      color="0.45", mec="k", mew=0.5, ls="", ms=7, label=f) for f in families]
    handles += [Line2D([], [], label=label, **kw) for label, kw in extra.items()]
    if handles:
        ax.legend(handles=handles, fontsize=7, loc="best", framealpha=0.9)


def fmt_interval(mean: float, low: float, high: float, digits: int = 2) -> str:
    """'81.2 [79.9, 82.6]', or the mean alone when there is no interval (one seed)."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    if low is None or (isinstance(low, float) and math.isnan(low)):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def fmt_ratio(x: float) -> str:
    """A ratio to a floor: two decimals, or two significant digits below 0.1 (a sampled step is 0.00057 of a
    1M-word softmax's floor, which two decimals write as 0.00)."""
    return "—" if pd.isna(x) else f"{x:.2f}" if abs(x) >= 0.1 else f"{x:.2g}"


def fmt_si(x: float, unit: str = "") -> str:
    """1.23k, 4.5M, 6.7G with a unit."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    for div, p in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{p}{unit}"
    return f"{x:.3g}{unit}"


def pareto_front(cost: pd.Series, quality: pd.Series) -> pd.Series:
    """True where no other point is at most as costly and strictly better (both minimised)."""
    c, q = cost.to_numpy(float), quality.to_numpy(float)
    front = []
    for i in range(len(c)):
        dominated = np.any((c <= c[i]) & (q <= q[i]) & ((c < c[i]) | (q < q[i])))
        front.append(not dominated)
    return pd.Series(front, index=cost.index)
