"""The Markdown tables of a publication, for the README and docs: each results table of ``benchmarks/NAME``
rendered for people (``render_table``), numbers formatted as a reader wants them (``∞`` for an infinite
value, ``—`` where there is none, intervals at the publication's own confidence)."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..io import paths
from ..io.artifacts import read_csv, read_json
from ..io.errors import ConfigError
from ..io.paths import REPOSITORY
from .bench_tables import (
    bench_markdown,
    cell_bench_markdown,
    sampler_bias_markdown,
    sampler_costs_markdown,
    step_bench_markdown,
    step_breakdown_markdown,
)
from .axis_markdown import (  # noqa: F401 (the budget and token axes' tables, rendered here by name)
    axes_grid_markdown, axes_markdown, budget_ranking_markdown, cosine_markdown, crossovers_markdown,
    gpu_equal_time_markdown, rate_sweep_block, rates_markdown)
from .markdown import fmt_ci, fmt_millions, fmt_num, frame_markdown, markdown_table, partial_label
from .report_tables import (
    budget_fits_table,
    gpu_hours_people,
    memory_table,
    memory_worth,
)


def headline_markdown(head: pd.DataFrame, refs: pd.DataFrame | None = None, level: int = 95) -> str:
    """The headline table of a published run, one block per dataset, for the README and docs; with the
    count-based reference rows (``references.csv``: Kneser-Ney) in their place by test perplexity."""
    out = []
    for ds, h in head.groupby("dataset", sort=False):
        kn = refs[(refs.dataset == ds) & (refs.split == "test")] if refs is not None and not refs.empty else None
        if kn is not None and not kn.empty:
            kn = kn.assign(method=[f"{m}-{o} (count-based)" for m, o in zip(kn.method, kn.order)], row_kind="reference",
                           train_time_s=kn.fit_seconds)
            h = pd.concat([h, kn[["method", "nll", "ppl", "gap_nll", "train_time_s", "row_kind"]]], ignore_index=True)
        h = h.sort_values("nll")
        ref = h.reference.dropna().iloc[0]
        note = ""
        if "verdict_reference" in h and h.status.notna().any():  # verdicts against a stand-in, or none
            used = h.verdict_reference.dropna()
            why = "did not learn" if (h.method == ref).any() else "not run here"
            note = f" ({ref} {why}: verdicts against {used.iloc[0]})" if len(used) and used.iloc[0] != ref \
                else " (no method learned: no verdicts)" if not len(used) else ""
            ref = used.iloc[0] if len(used) else ref
        seeds = int(h.seeds.max())
        ci = f"{level}% CI" if seeds > 1 else "one seed: no CI"
        cols = ["method", f"test ppl [{ci}]", f"Δ nll vs {ref} [{ci}]", "verdict"]
        uneven = h.seeds.nunique() > 1  # a partial run: methods have different numbers of seeds so far
        if uneven:
            cols.insert(1, "seeds")
        synthetic = h.gap_nll.notna().any()
        if synthetic:
            cols.append("gap to truth (nats)")
        best = "best_model_ppl" in h and h.best_model_ppl.notna().any()  # keep: last
        if best:
            cols.append("best-valid epoch's test ppl")
        paper = "paper_ppl" in h and h.paper_ppl.notna().any()
        if paper:
            cols += ["paper", "vs paper"]
        cols += ["rank", "train s", "head kFLOP/token (train)"]
        budget = "tokens_reached" in h and h.tokens_reached.notna().any()  # a time budget: what it bought
        if budget:
            cols.insert(-1, "tokens in budget")
        rows = []
        for r in h.itertuples():
            if getattr(r, "row_kind", None) == "reference":  # no seeds, no verdict, no head: its fit time
                cells = [r.method, fmt_num(r.ppl, 1), "—", "reference (no seeds)"] + (["—"] if uneven else []) \
                    + ([fmt_num(r.gap_nll, 3)] if synthetic else []) + (["—"] if best else []) \
                    + (["—", "—"] if paper else []) + ["—", f"{r.train_time_s:.2g} (fit)"] + (["—"] if budget else []) + ["—"]
                rows.append(cells)
                continue
            zero = getattr(r, "zero_prob_tokens", None)
            cells = [r.method, fmt_ci(r.ppl, r.ppl_low, r.ppl_high, 1) + (
                         f" ({int(zero)} test tokens scored probability 0 over {int(r.seeds)} seeds)"
                         if zero is not None and zero > 0 else ""),
                     "—" if r.method == ref else fmt_ci(r.delta_nll, r.delta_low, r.delta_high, 3, signed=True),
                     r.verdict]
            if uneven:
                cells.insert(1, str(int(r.seeds)))
            if synthetic:
                cells.append(fmt_num(r.gap_nll, 3))
            if best:
                cells.append(fmt_num(r.best_model_ppl, 2))
            if paper:
                cells += ["—", "—"] if pd.isna(r.paper_ppl) else [f"{r.paper_ppl:.2f}", f"{100 * r.vs_paper:+.1f}%"]
            if pd.isna(r.logprob_rank):  # rank_contexts: 0 (no rank diagnostic in this run)
                rank = "—"
            else:
                rank = f"{r.logprob_rank:.0f}" + (f" (≤ {int(r.head_dim) + 2})" if r.logprob_rank <= r.head_dim + 2 else "")
            cells += [rank, f"{r.train_time_s:.0f}"] + ([fmt_millions(r.tokens_reached)] if budget else []) \
                + [f"{r.head_flops_per_token_train / 1e3:.1f}"]
            rows.append(cells)
        title = f"**{ds}** ({seeds} seeds{' at most' if uneven else ''}){note}\n" if len(head.dataset.unique()) > 1 \
            else (f"*{note.strip(' ()')}*\n" if note else "")
        out.append(title + markdown_table(cols, rows))
    return "\n\n".join(out) + "\n"


def sweep_markdown(summary: pd.DataFrame, head: pd.DataFrame, refs: pd.DataFrame | None = None,
                   level: int = 95) -> str:
    """A sweep over vocabulary sizes (``sweep.py``), from a publication's summary.csv and headline.csv: per |V|
    the methods ranked by test perplexity with the verdict against the reference, the tokens the budget bought
    and the gap to the truth per frequency band (nats; each band's share of the test tokens in its header), or
    on real text, without a truth, each band's test perplexity;
    then the lowest neural test perplexity at each size, beside the count-based reference where
    references.csv has one, and, over several sizes, where each method overtakes the reference."""
    from ..data.bands import BANDS
    from .sweep import by_size, crossover_lines, winner_lines

    if "vocab" not in summary:
        raise ConfigError("summary.csv has no 'vocab' column (summarized by an earlier version): run `summarize` "
                          "again before reading it as a sweep")
    table = by_size(head, summary)
    if table.empty:
        return "*No finished run in this publication.*\n"
    test = summary[summary.split == "test"]
    ref = head.reference.dropna().iloc[0]
    out = []
    for vocab, at in table.groupby("vocab"):
        ds = test[test.vocab == vocab]
        total = ds.tokens.iloc[0]
        share = {b: f" ({ds[f'{b}_tokens'].iloc[0] / total:.0%} of tokens)" if f"{b}_tokens" in ds else "" for b in BANDS}
        ci = f"{level}% CI" if at.ppl_low.notna().any() else "one seed: no CI"
        truth = at[[f"{b}_gap_nll" for b in BANDS]].notna().any().any()  # real text: each band's perplexity
        band, key, digits = ("gap", "gap_nll", 3) if truth else ("ppl", "ppl", 1)
        old = at.status.isna().all()  # a headline from before the status column: its verdicts are against ref
        used = pd.Series([ref]) if old else at.verdict_reference.dropna()
        against = f"verdict vs {used.iloc[0]}" if len(used) else "verdict (no method learned)"
        if len(used) and used.iloc[0] != ref:
            against += f" ({ref} did not learn)"
        cols = ["rank", "method", f"test ppl [{ci}]", against, "tokens in budget",
                *[f"{band}: {b}{share[b]}" for b in BANDS]]
        rows = [["—" if pd.isna(r.rank_at_size) else str(r.rank_at_size), r.method,
                 "—" if pd.isna(r.ppl) else fmt_ci(r.ppl, r.ppl_low, r.ppl_high, 1),
                 "—" if pd.isna(r.verdict) else r.verdict,
                 fmt_millions(r.tokens_reached), *[fmt_num(getattr(r, f"{b}_{key}"), digits) for b in BANDS]]
                for r in at.itertuples()]
        out.append(f"**|V| = {vocab:,}** ({ds.dataset.iloc[0]})\n" + markdown_table(cols, rows))
    text = "\n\n".join(out) + "\n\nLowest test perplexity of a neural output layer at each size:\n\n" + \
        "\n".join(winner_lines(table, refs)) + "\n"
    cross = crossover_lines(table, ref)
    return text + (f"\nAgainst {ref} across sizes:\n\n" + "\n".join(cross) + "\n" if cross else "")


def contrasts_markdown(con: pd.DataFrame, level: int = 95) -> str:
    """Each declared contrast (a method against its own control), for the README and docs."""
    if con.empty:
        return "*No contrast declared (`statistics.contrasts`).*\n"
    many = con.dataset.nunique() > 1
    cols = (["dataset"] if many else []) + ["method", "control", "test ppl", "control's", "seeds paired",
                                            f"Δ nll vs control [{level}% CI]", "verdict"]
    rows = []
    for r in con.itertuples():
        cells = [r.method, r.control, fmt_num(r.ppl, 2), fmt_num(r.control_ppl, 2),
                 "0" if pd.isna(r.pairs) else f"{r.pairs:.0f}",
                 "—" if pd.isna(r.delta_nll) else fmt_ci(r.delta_nll, r.delta_low, r.delta_high, 3, signed=True),
                 r.verdict]
        rows.append(([r.dataset] if many else []) + cells)
    return markdown_table(cols, rows) + "\n"


def references_markdown(refs: pd.DataFrame) -> str:
    """The count-based reference rows (Kneser-Ney) per dataset: order chosen on valid, valid and test
    perplexity, gap to the truth where known, fitting time."""
    if refs.empty:
        return "*No reference rows in this run.*\n"
    rows = []
    for (ds, method), g in refs.groupby(["dataset", "method"], sort=False):
        v, t = g[g.split == "valid"].iloc[0], g[g.split == "test"].iloc[0]
        gap = "" if pd.isna(t.get("gap_nll")) else fmt_num(t.gap_nll, 3)
        rows.append([ds, f"{method}-{int(t.order)}", fmt_num(v.ppl, 2), fmt_num(t.ppl, 2), gap, f"{int(t.tokens):,}",
                     f"{int(t.train_tokens):,}", f"{int(t.vocab):,}", f"{t.fit_seconds:.1f}"])
    return markdown_table(["dataset", "reference", "valid ppl", "test ppl", "gap to truth (nats)", "test tokens",
                           "train tokens", "vocab", "fit s"], rows) + "\n"


def _option_cell(v) -> str:
    """An option's value as set: a whole number (negatives, tau) in full, a real one to 3 significant digits."""
    if pd.isna(v):
        return ""
    if isinstance(v, float):
        return f"{v:,.0f}" if v.is_integer() else f"{v:.3g}"
    return str(v)


def selected_markdown(trials: pd.DataFrame) -> str:
    """The settings each method's tuning selected, with its trial budget and divergences."""
    opts = [c for c in trials.columns if c.startswith("opt_")]
    cols = ["dataset", "method", "selected trial", "lr", *[c[4:] for c in opts], "trial valid ppl",
            "trials (diverged)"]
    rows = []
    for (ds, m), g in trials.groupby(["dataset", "method"], sort=False):
        r = g[g.selected].iloc[0]
        cells = [ds, m, str(int(r.trial)), f"{r.lr:.3g}"]
        cells += [_option_cell(r[c]) for c in opts]
        rows.append(cells + [fmt_num(r.valid_ppl, 2), f"{len(g)} ({int((g.status != 'ok').sum())})"])
    return markdown_table(cols, rows) + "\n"


def provenance_markdown(prov: dict) -> str:
    wall = prov.get("wall_time_s")
    rows = [("command", f"`{prov['command']}`"), ("commit", f"`{prov['commit'][:12]}`"),
            ("run seeds", ", ".join(map(str, prov["seeds"]))),
            ("wall time", "not recorded" if wall is None else f"{wall // 60:.0f} min {wall % 60:.0f} s"),
            *([("runs", f"{prov['runs']['runs']} of {prov['runs']['of']}; not yet run: "
                        f"{_missing(prov['runs']['missing'])}")] if (prov.get("runs") or {}).get("partial") else []),
            ("machine", prov["cpu_model"]), ("published", prov["published"])]
    return "| | |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows)


def _missing(missing: list[str], listed: int = 8) -> str:
    """What a partial summary has not run yet: each item while they are few, else a count per group (a
    dataset's runs, ``tuning/<dataset>``'s methods, references, matrix fits)."""
    if len(missing) <= listed:
        return ", ".join(missing)
    groups: dict[str, int] = {}
    for m in missing:
        parts = m.split("/")
        key = "/".join(parts[:2]) if parts[0] in ("tuning", "references") else parts[0]
        groups[key] = groups.get(key, 0) + 1
    return ", ".join(f"{k} ({n})" for k, n in groups.items()) + f"; {len(missing)} in all"


def render_table(path: str) -> str:
    """The markdown of a results-table block naming ``path`` (relative to the repository root), drawn only from
    publications whose files are what was published (``seals.check_publication``)."""
    from .seals import check_publication

    if path.startswith(("glance:", "axes:", "cosine:", "rates:", "sweep:", "ladders:", "equal-times:",
                            "speed-loo:")):
        levels = {}
        for name in path.split(":", 1)[1].split(","):
            if path.startswith("speed-loo:"):  # names of profiles: their bench publications
                from .profiles import PROFILES

                if name in PROFILES:
                    check_publication(REPOSITORY / PROFILES[name])
                continue
            if (REPOSITORY / "benchmarks" / name / paths.PROVENANCE).is_file():
                check_publication(REPOSITORY / "benchmarks" / name)
                params = read_json(REPOSITORY / "benchmarks" / name / paths.PROVENANCE).get("params") or {}
                levels[name] = (params.get("statistics") or {}).get("confidence", 0.95)
        if len(set(levels.values())) > 1 and not path.startswith("glance:"):  # the glance reads every one at 95%
            raise ConfigError(f"results-table {path}: its publications differ in statistics.confidence ("
                              f"{', '.join(f'{n} {v:g}' for n, v in levels.items())}): one table, one meaning of its "
                              f"intervals and bold; restate them at one level")
    elif (REPOSITORY / path.removeprefix("memory:")).with_name(paths.PROVENANCE).is_file():
        check_publication((REPOSITORY / path.removeprefix("memory:")).parent)
    if path.startswith("glance:"):  # what to use in each dataset of several publications (the README's glance)
        return glance_markdown(path.split(":", 1)[1].split(","))
    if path.startswith("axes:"):  # what to use over (|V|, budget), from several budget-axis publications
        return axes_markdown(path.split(":", 1)[1].split(","))
    if path.startswith("cosine:"):  # a cosine check's runs against a ladder publication's rungs
        return cosine_markdown(*path.split(":", 1)[1].split(","))
    if path.startswith("rates:"):  # a rate check's neighbouring rates against a ladder publication's picks
        return rates_markdown(*path.split(":", 1)[1].split(","))
    if path.startswith("sweep:"):  # every rate tried where the best rate moved: the ladder, its checks, a retune
        return rate_sweep_block(*path.split(":", 1)[1].split(","))
    if path.startswith("speed-loo:"):  # a profile's tokens/s read across |V|, checked on its own inner sizes
        from .ladder_grids import speed_loo_markdown

        return speed_loo_markdown(path.split(":", 1)[1].split(","))
    if path.startswith(("ladders:", "equal-times:")):  # several token ladders' grids: equal data, equal time
        from .ladder_grids import equal_times_markdown, ladders_markdown

        names = path.split(":", 1)[1].split(",")
        return ladders_markdown(names) if path.startswith("ladders:") else equal_times_markdown(names)
    memory = path.startswith("memory:")  # the topic language's rows against its two lines (its summary.csv)
    path = path.removeprefix("memory:")
    file = REPOSITORY / path
    if not file.exists():  # a page may announce a run before it is published
        return f"*Not published yet: run it, then `python -m pipeline_src publish --name {Path(path).parent.name}`.*\n"
    prov = file.with_name(paths.PROVENANCE)  # the intervals' level is the publication's (restate may change it)
    params = read_json(prov).get("params") or {} if prov.is_file() else {}
    level = int(round(100 * ((params.get("statistics") or {}).get("confidence") or 0.95)))
    if memory:
        return memory_markdown(read_csv(file, "dataset", "method", "seed", "split", "nll"), level)
    if file.name in ("headline.csv", "summary.csv"):  # summary.csv: a sweep's reading across sizes
        refs = file.with_name("references.csv")
        refs = pd.read_csv(refs) if refs.exists() and refs.stat().st_size > 1 else None
        if file.name == "headline.csv":
            return headline_markdown(pd.read_csv(file), refs, level)
        return sweep_markdown(pd.read_csv(file), pd.read_csv(file.with_name("headline.csv")), refs, level)
    if file.name == "provenance.json":
        return provenance_markdown(read_json(file))
    if file.name in BY_LEVEL:
        return BY_LEVEL[file.name](pd.read_csv(file), level)
    if file.name in PLAIN:
        return PLAIN[file.name](pd.read_csv(file))
    raise ConfigError(f"no table format for {path}")


def advice_markdown(table: pd.DataFrame, level: int = 95, publication: str | None = None) -> str:
    """The what-to-use table in Markdown: one row per dataset (``publication`` adds a first column)."""
    def fmt(x: float, digits: int = 1) -> str:
        return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.{digits}f}"

    from .advice import holm_note

    cols = (["run"] if publication else []) + ["dataset (words)", "use (chosen on valid)", "test ppl",
            f"margin over the runner-up (Δ test nll, unadjusted {level}% CI; Holm p)", "runner-up", "reference",
            "Kneser-Ney"]
    out = []
    for r in table.itertuples():
        name = f"{r.dataset} ({r.vocab:,})" if isinstance(r.vocab, (int, float)) and not pd.isna(r.vocab) else r.dataset
        if not isinstance(r.use, str):
            cells = [name, f"no method learned ({r.methods} tried)", "—", "—", "—"]
        else:
            margin = "one method learned" if not isinstance(r.runner_up, str) else (
                "no paired seeds" if pd.isna(r.margin_nll) else
                f"{r.margin_nll:+.3f} over 1 seed: no interval" if pd.isna(r.margin_low) else
                f"{r.margin_nll:+.3f} [{r.margin_low:+.3f}, {r.margin_high:+.3f}] over {int(r.pairs)} seeds"
                + holm_note(r) + ("" if r.clear else ": not separated"))
            ppl = fmt(r.ppl) + ("" if pd.isna(r.ppl_low) else f" [{fmt(r.ppl_low)}, {fmt(r.ppl_high)}]")
            sure = r.clear is True or not isinstance(r.runner_up, str)  # bold: separated, or the only one that learned
            cells = [name, f"**{r.use}**" if sure else r.use, ppl, margin,
                     f"{r.runner_up} ({fmt(r.runner_up_ppl)})" if isinstance(r.runner_up, str) else "—"]
        ref = "—" if not isinstance(r.reference, str) else (
            f"{r.reference} {fmt(r.reference_ppl)}" + ("" if r.reference_status == "learned" else
                                                        f" ({r.reference_status})"))
        out.append(([publication] if publication else []) + cells + [ref, fmt(r.kn_ppl)])
    return markdown_table(cols, out) + "\n"


GLANCE_LEVEL = 95  # the glance's intervals and separation (Holm p < 0.05), for every publication it joins


def glance_markdown(publications: list[str]) -> str:
    """The README's glance table: what to use in each dataset of each named publication (benchmarks/NAME), each
    recomputed from its per-seed test nll at ``GLANCE_LEVEL`` (a publication restated at another level keeps its
    own in its report)."""
    from .advice import what_to_use

    parts = []
    level = GLANCE_LEVEL  # every publication read at one level, whatever its own: one meaning of bold and interval
    for name in publications:
        pub = REPOSITORY / "benchmarks" / name
        refs = pub / "references.csv"
        table = what_to_use(pd.read_csv(pub / "summary.csv"), pd.read_csv(pub / "headline.csv"),
                            pd.read_csv(refs) if refs.is_file() and refs.stat().st_size > 1 else None, level / 100)
        runs = (read_json(pub / paths.PROVENANCE).get("runs") or {}) if (pub / paths.PROVENANCE).is_file() else {}
        label = partial_label(name, runs)
        parts.append(advice_markdown(table, level, label).split("\n", 2))
    header = parts[0][:2]
    return "\n".join(header + [p[2].rstrip("\n") for p in parts]) + "\n"



def memory_markdown(summary: pd.DataFrame, level: int = 95) -> str:
    """The topic language's rows against its two lines, per dataset (``report_tables.memory_table``), each headed
    by what reading the topic is worth there (memoryless minus truth, nats/token, on the rows' test tokens)."""
    test = summary[summary.split == "test"]
    if "memoryless_nll" not in test or test.memoryless_nll.isna().all():
        raise ConfigError("memory: blocks read a topic language's summary.csv (with memoryless_nll); this has none")
    parts = []
    for ds, g in test.dropna(subset=["memoryless_nll"]).groupby("dataset", sort=False):
        parts.append(f"**{ds}** (test nll gaps in nats/token, means over seeds [{level}% interval]; reading the topic "
                     f"is worth {memory_worth(g):.3f} nats/token):\n\n" + frame_markdown(memory_table(g, level / 100)))
    return "\n".join(parts)


def budget_advice_markdown(table: pd.DataFrame, level: int = 95) -> str:
    """budget-advice.csv: what to use over (|V|, budget), one row per dataset and multiple."""
    rows = table.assign(dataset=[f"{d} ({v:,.0f}) at {m:g}x" if pd.notna(v) else f"{d} at {m:g}x"
                                 for d, v, m in zip(table.dataset, table.vocab, table.multiple)], vocab=None)
    return advice_markdown(rows, level)


def gpu_hours_markdown(df: pd.DataFrame) -> str:
    """gpu-hours.csv, per dataset: the table where the GPU bench measured something, else one line saying so."""
    from .report_tables import gpu_hours_unmeasured

    return "\n".join(f"**{ds}**: {line}\n" if (line := gpu_hours_unmeasured(g)) else
                     f"**{ds}**:\n\n" + frame_markdown(gpu_hours_people(g)) for ds, g in df.groupby("dataset", sort=False))


def _per_dataset(frame_of) -> callable:
    def render(df: pd.DataFrame) -> str:
        return "\n".join(f"**{ds}**:\n\n" + frame_markdown(frame_of(g)) for ds, g in df.groupby("dataset", sort=False))
    return render



# the tables render_table formats by file name: at the publication's confidence level, or as they are
def equal_tokens_markdown(points: pd.DataFrame) -> str:
    """anytime.csv: the equal-data reading, per dataset (``sweep.equal_tokens_table``)."""
    from .sweep import EQUAL_TOKENS_CAPTION, equal_tokens_table

    wide = equal_tokens_table(points)
    if wide.empty:
        return "*No validation at equal data in this run (`training.anytime_epochs`).*\n"
    return "\n".join(f"**{ds}** ({EQUAL_TOKENS_CAPTION}):\n\n"
                     + frame_markdown(g.drop(columns="dataset").dropna(axis=1, how="all"))
                     for ds, g in wide.groupby("dataset", sort=False))


from .ladder_tables import equal_data_markdown, equal_time_markdown, leave_one_out_markdown  # noqa: E402

BY_LEVEL = {"contrasts.csv": contrasts_markdown, "budget-ranking.csv": budget_ranking_markdown,
            "budget-advice.csv": budget_advice_markdown, "gpu-equal-time.csv": gpu_equal_time_markdown}
PLAIN = {"references.csv": references_markdown, "bench.csv": bench_markdown, "step-bench.csv": step_bench_markdown,
         "cell-bench.csv": cell_bench_markdown, "step-breakdown.csv": step_breakdown_markdown,
         "tuning.csv": selected_markdown, "sampler-costs.csv": sampler_costs_markdown,
         "sampler-bias.csv": sampler_bias_markdown, "crossovers.csv": crossovers_markdown,
         "budget-fits.csv": _per_dataset(budget_fits_table), "anytime.csv": equal_tokens_markdown,
         "gpu-hours.csv": gpu_hours_markdown, "ladder-advice.csv": equal_data_markdown,
         "equal-time.csv": equal_time_markdown, "ladder-loo.csv": leave_one_out_markdown}
