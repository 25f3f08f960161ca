"""The budget axis's and the token axis's Markdown tables (README and docs blocks, ``tables.render_table``): what
to use over (|V|, budget) from several budget-axis publications, a budget axis's ranking, crossovers and GPU
equal time, and a token ladder's checks against cosine runs and neighbouring rates."""
from __future__ import annotations

import pandas as pd

from ..io import paths
from ..io.artifacts import read_json
from ..io.errors import ConfigError
from ..io.paths import REPOSITORY
from .markdown import frame_markdown
from .report_tables import budget_ranking_table, gpu_equal_time_table


def _publications(*names: str) -> tuple[list, str]:
    """The named publications' folders, and the line a block shows while one of them is not published ("")."""
    pubs = [REPOSITORY / "benchmarks" / n for n in names]
    missing = [p.name for p in pubs if not (p / paths.PROVENANCE).is_file()]
    return pubs, f"*Not published yet: {', '.join(missing)}.*\n" if missing else ""


def cosine_markdown(cosine: str, ladder: str) -> str:
    """``cosine:NAME,LADDER``: publication NAME's cosine runs (their token budgets from its params'
    ``training.budget_tokens_by_method``) against publication LADDER's rung models (``ladder_tables.against_cosine``)."""
    from .ladder_tables import against_cosine, against_cosine_markdown

    pubs, missing = _publications(cosine, ladder)
    if missing:
        return missing
    params = read_json(pubs[0] / paths.PROVENANCE)["params"]
    budgets = {m: t for d in params["datasets"].values()
               for m, t in ((d.get("training") or {}).get("budget_tokens_by_method") or {}).items()}
    level = (params.get("statistics") or {}).get("confidence", 0.95)
    table = against_cosine(pd.read_csv(pubs[1] / "anytime.csv"), pd.read_csv(pubs[0] / "summary.csv"), budgets, level)
    return against_cosine_markdown(table, int(round(100 * level)))


def rates_markdown(rates: str, ladder: str) -> str:
    """``rates:NAME,LADDER``: publication NAME's neighbouring rates against publication LADDER's picks, on
    validation at each rung NAME trained (``ladder_tables.rate_check``)."""
    from .ladder_tables import rate_check, rate_check_markdown

    pubs, missing = _publications(rates, ladder)
    if missing:
        return missing
    frames = [pd.read_csv(p / f) for p in pubs[::-1] for f in ("anytime.csv", "summary.csv")]
    return rate_check_markdown(rate_check(*frames))


def rate_sweep_block(ladder: str, *checks: str) -> str:
    """``sweep:LADDER,CHECK,...,RETUNE``: every rate tried at each rung for the methods RETUNE retuned, from the
    ladder's picks and the checks' runs (``ladder_tables.rate_sweep``)."""
    from .ladder_tables import rate_sweep, rate_sweep_markdown

    pubs, missing = _publications(ladder, *checks)
    if missing:
        return missing
    frames = [(pd.read_csv(p / "anytime.csv"), pd.read_csv(p / "summary.csv")) for p in pubs]
    return rate_sweep_markdown(rate_sweep(*frames[0], frames[1:]))


def axes_markdown(publications: list[str]) -> str:
    """What to use over (|V|, budget), from the named budget-axis publications' ``budget-advice.csv`` (their
    order is the rows'): one row per dataset, one column per budget of ``advice.AXIS_MULTIPLES``."""
    frames = []
    for name in publications:
        file = REPOSITORY / "benchmarks" / name / "budget-advice.csv"
        if not file.is_file():
            raise ConfigError(f"axes:{','.join(publications)}: {file} does not exist (publish {name} first, "
                              f"or leave it out)")
        frames.append(pd.read_csv(file))
    return axes_grid_markdown(frames)


def axes_grid_markdown(frames: list[pd.DataFrame]) -> str:
    """``advice.two_axes`` of several ``budget-advice.csv`` tables, their datasets in the order given."""
    from .advice import two_axes

    advice = pd.concat(frames, ignore_index=True)
    grid = two_axes(advice)
    seeds = advice.groupby("dataset", sort=False).pairs.max()  # the seeds the margins pair
    grid.insert(0, "dataset (words)", [(f"{d} ({v:,})" if pd.notna(v) else d) + ("" if pd.isna(seeds[d]) else
                                                                                  f", {seeds[d]:.0f} seeds")
                                       for d, v in zip(grid.dataset, grid.vocab)])
    return frame_markdown(grid.drop(columns=["dataset", "vocab"]))


def _axis_reference(ranked: pd.DataFrame) -> str:
    """The reference a budget-axis table's verdicts are against (its ``reference`` column; the softmax if unnamed)."""
    named = ranked.reference.dropna() if "reference" in ranked else pd.Series(dtype=object)
    return named.iloc[0] if len(named) else "softmax"


def budget_ranking_markdown(ranked: pd.DataFrame, level: int = 95) -> str:
    """budget-ranking.csv: per dataset, test perplexity [interval] and the verdict at each multiple of the budget."""
    reference = _axis_reference(ranked)

    def against(g: pd.DataFrame) -> str:
        stand_in = "verdict_reference" in g and (g.verdict_reference.dropna() != reference).any()
        return f"{reference} (or its stand-in where {reference} did not learn)" if stand_in else reference

    parts = [f"**{ds}** (test perplexity [{level}% interval] and, at each budget, the verdict against "
             f"{against(g)}):\n\n" + frame_markdown(budget_ranking_table(g, reference, level))
             for ds, g in ranked.groupby("dataset", sort=False)]
    return "\n".join(parts)


def gpu_equal_time_markdown(ranked: pd.DataFrame, level: int = 95) -> str:
    """gpu-equal-time.csv: per dataset, the ranking at equal seconds on the GPU, with each method's own multiple."""
    if ranked.empty:
        return ("*No GPU budget at which every method lies within its measured multiples: no reading at equal "
                "seconds.*\n")
    reference = _axis_reference(ranked)
    return "\n".join(f"**{ds}** (test perplexity [{level}% interval], verdict against {reference}, and the multiple "
                     f"of its own 1x each method reaches in those GPU seconds):\n\n"
                     + frame_markdown(gpu_equal_time_table(g, reference, level))
                     for ds, g in ranked.groupby("dataset", sort=False))


def crossovers_markdown(pairs: pd.DataFrame) -> str:
    """crossovers.csv: the measured crossover of each pair, then where the fits cross beyond (extrapolated)."""
    lines = [f"- {r.dataset}: {r.text}" + ("" if pd.isna(r.fits_cross_at) else
                                           f"; the fits cross at {r.fits_cross_at:.3g}x (extrapolated)")
             for r in pairs.itertuples()]
    return "\n".join(lines) + "\n" if lines else "*No two methods learned at the largest budget.*\n"
