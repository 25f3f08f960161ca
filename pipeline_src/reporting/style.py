"""How the report shows methods and numbers: one colour-blind-safe colour and marker per method from one fixed
table, the same in every figure of every report; table formatting for people. Imported by the report notebook (which reads only results)."""
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
# the methods of the token-axis grids (the README's first screen): they take the palette's first colours, so the
# figures that show them together never repeat a colour (past ten methods only the (colour, marker) pair is unique)
FIRST = ("softmax", "hierarchical-softmax", "sampled-softmax", "sampled-softmax-in-batch", "nce", "adaptive-softmax")


def family(method_type: str) -> str:
    return FAMILY_OF.get(method_type, "other")


def known_methods() -> dict[str, str]:
    """The methods the repository's params.yaml defines, ``{name: head type}``: the fixed table every report's
    colours come from (so a method looks the same in every figure of every report)."""
    import yaml

    from ..io.paths import REPOSITORY

    try:
        defined = yaml.safe_load((REPOSITORY / "params.yaml").read_text(encoding="utf-8")).get("methods") or {}
    except (OSError, yaml.YAMLError, AttributeError):
        defined = {}
    return {m: (spec or {}).get("type", m) for m, spec in defined.items()}


def _assign(order: list[str], types: dict[str, str], colors: list[str], styles: dict, used: set) -> None:
    """Give each method of ``order`` the next colour of the palette and its family's marker; a (colour, marker) pair
    already taken moves to the next marker, so no two methods share a pair."""
    for m in order:
        if m in styles:
            continue
        f = family(types[m])
        color = colors[len(styles) % len(colors)]
        marker = FAMILY_MARKER.get(f, "X")
        k = MARKERS.index(marker) if marker in MARKERS else 0
        while (color, marker) in used:
            k += 1
            marker = MARKERS[k % len(MARKERS)]
        used.add((color, marker))
        styles[m] = {"color": color, "marker": marker, "family": f}


def method_styles(methods: dict[str, str], together: list[set[str]] | None = None) -> dict[str, dict]:
    """``{method name: head type}`` -> ``{method: {"color", "marker", "family"}}`` from one fixed table: the methods
    params.yaml defines, in the order of their families, head types and names, each the next colour of a
    colour-blind-safe palette and its family's marker (a pair already taken: the next marker), so a method has the
    same colour and marker in every figure of every report and no two methods share a pair (the ``FIRST`` methods
    take the first colours, each its own). A method the table
    does not hold (a plugin, a config's own variant) takes the next unused pairs, in the same order. ``together``
    is accepted for callers that name the figures' groups; the table makes every pair unique anyway."""
    import matplotlib

    colors = [matplotlib.colors.to_hex(c) for c in matplotlib.color_sequences[PALETTE]]
    rank = {f: i for i, f in enumerate(FAMILIES)}
    known = known_methods()
    key = lambda types: lambda m: (FIRST.index(m) if m in FIRST else len(FIRST),  # noqa: E731
                                   rank.get(family(types[m]), len(rank)), types[m], m)
    styles: dict[str, dict] = {}
    used: set = set()
    _assign(sorted(known, key=key(known)), known, colors, styles, used)
    types = {**known, **{m: t for m, t in methods.items() if m not in known}}
    _assign(sorted((m for m in methods if m not in known), key=key(types)), types, colors, styles, used)
    return {m: styles[m] for m in methods}


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
