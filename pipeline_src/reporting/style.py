"""How the report shows methods and numbers: one colour and marker per method, kept across every plot,
grouped by family; table formatting for people. Imported by the report notebook (which reads only results)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..heads.families import FAMILIES
from ..heads.options import head_families

FAMILY_OF = head_families()  # every registered head type has its family (declared where it is registered)
FAMILY_MARKER = dict(zip(FAMILIES, ["o", "s", "^", "D", "P"]))
# per family a colormap; methods of a family take evenly spaced shades of it
FAMILY_CMAP = dict(zip(FAMILIES, ["Blues", "Reds", "Greens", "Purples", "Oranges"]))


def family(method_type: str) -> str:
    return FAMILY_OF.get(method_type, "other")


def method_styles(methods: dict[str, str]) -> dict[str, dict]:
    """``{method name: head type}`` -> ``{method: {"color", "marker", "family"}}``: no two methods share a
    (colour, marker) pair, a family shares a hue and a marker, the same names always get the same style."""
    import matplotlib

    by_family: dict[str, list[str]] = {}
    for m, t in methods.items():
        by_family.setdefault(family(t), []).append(m)
    styles = {}
    extra = matplotlib.colormaps["tab10"]
    if len(by_family) == 1 and len(methods) > 1:  # one family only (variants of one head): hues say nothing,
        markers = ["o", "s", "^", "D", "P", "v", "X", "*"]  # so each method its own colour and marker
        f = next(iter(by_family))
        return {m: {"color": matplotlib.colors.to_hex(extra(i % 10)), "marker": markers[i % len(markers)],
                    "family": f} for i, m in enumerate(sorted(methods))}
    for f, ms in by_family.items():
        order = sorted(ms, key=lambda m: (methods[m], m))  # by head type, then name
        if f in FAMILY_CMAP:
            cmap = matplotlib.colormaps[FAMILY_CMAP[f]]
            shades = np.linspace(0.9, 0.45, len(order)) if len(order) > 1 else [0.75]
            colors = [cmap(x) for x in shades]
        else:
            colors = [extra(i % 10) for i in range(len(order))]
        for m, c in zip(order, colors):
            styles[m] = {"color": matplotlib.colors.to_hex(c), "marker": FAMILY_MARKER.get(f, "X"), "family": f}
    return styles


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
