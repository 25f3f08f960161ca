"""A new output layer against a publication's rows, without retraining them (``python -m pipeline_src compare``).

``compare --head mypkg.heads:MyHead --against default`` takes the publication's params as it recorded them
(``benchmarks/NAME/provenance.json``), adds the head as one more method of the crossings that run the chosen
datasets, and points ``results_dir`` at ``results/compare/<as>``. The published rows come back through
``restore`` from the publication's records (each checked against its sha256 and against the config the params
give it now: a stale publication is refused, not half-compared); Snakemake trains and evaluates only the new
head's runs (its seeds, its budget, the same encoder and data), the bench times it beside the reference against
the matmul floor and its own, and a partial summary (no matrix experiment) recomputes the headline with the new
head in the Holm family. The card (``reporting/card.py``) is one page from those tables.

What is the same as the published rows: the params (data, encoder, training settings, seeds, statistics), hence
the frozen token budgets of the methods that have one, and a token ladder's rungs. A dataset whose published rows
trained tokens frozen from a time budget (``budget_tokens_by_method``) gives the new head tokens of its own that do
not depend on this machine (:func:`scale_frozen_tokens`): the reference's frozen tokens times the new head's speed
relative to the reference's, both timed here in alternating rounds, so that the machine's speed and its load
cancel. Only a dataset that ran on the clock alone (no frozen tokens) trains the new head on this machine's clock
(the card says which).
"""
from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

from ..config import ConfigError, run_datasets, run_pairs, run_seeds, validate
from ..io import paths
from ..io.artifacts import read_json


NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


def compare_params(head: str, options: dict, against: str, name: str, datasets: list[str] | None) -> dict:
    """The publication's params with ``name`` = {type: head, **options} added to the crossings of ``datasets``
    (default: all of them), results under results/compare/<name>, models not kept (the records are restored)."""
    import re

    from ..heads.options import options_of

    if not re.match(NAME_PATTERN, name):
        raise ConfigError(f"compare --as {name!r}: a method name is letters, digits, '_', '.' and '-'")
    pub = _publication_of_runs(against)
    prov_path = pub / paths.PROVENANCE
    params = validate(copy.deepcopy(read_json(prov_path, "params")["params"]), str(prov_path))
    if name in params["methods"]:
        raise ConfigError(f"compare --as {name}: already a method of benchmarks/{against} "
                          f"({sorted(params['methods'])}); choose another name")
    options_of(head)  # a missing module or a class that is no output layer: one line, before anything runs
    ran = run_datasets(params)
    chosen = list(datasets or ran)
    if unknown := [d for d in chosen if d not in ran]:
        raise ConfigError(f"compare --datasets {unknown[0]}: benchmarks/{against} ran {ran}")
    params["methods"][name] = {"type": head, **options}
    run = params["run"]
    crossings = [{"datasets": [d for d in c["datasets"] if d in chosen], "methods": [*c["methods"], name]}
                 for c in (run, run.get("extra") or {"datasets": [], "methods": []})]
    crossings = [c for c in crossings if c["datasets"]]  # the first one kept is run's own (it is required)
    params["run"] = {**run, **crossings[0], "extra": crossings[1] if len(crossings) > 1 else {"datasets": [], "methods": []}}
    reference = params["statistics"]["reference"]
    params["statistics"]["contrasts"] = [c for c in params["statistics"].get("contrasts", [])
                                         if all(m in _methods(params) for m in c)]
    params.update(results_dir=f"results/compare/{name}", keep_models=False)
    params["bench"] = {**params["bench"], "methods": [m for m in (reference, name) if m in params["methods"]]}
    return validate(params, f"compare --head {head} --against {against}")


SPEED_ROUNDS = 5  # alternating rounds of at least SPEED_SECONDS each method, for the relative speed
SPEED_SECONDS = 1.0


def scale_frozen_tokens(params: dict, name: str, device, say=print) -> dict[str, dict]:
    """For each dataset where ``name`` runs and the published rows trained tokens frozen from a time budget, freeze
    ``name``'s tokens too: the reference's frozen tokens x (the reference's ms per step / ``name``'s), the median
    over alternating rounds timed here (``cost.cells.alternating_ms``). Sets ``budget_tokens_by_method[name]`` in
    ``params`` and returns, by dataset, how (the card states it; ``scaled-tokens.json``)."""
    import statistics

    from ..config import train_config
    from ..cost.cells import alternating_ms

    out = {}
    for ds in sorted({d for d, m in run_pairs(params) if m == name}):
        tc = train_config(params, ds)
        frozen = dict(tc.budget_tokens_by_method)
        if not frozen or name in frozen or tc.ladder:
            continue
        ref = params["statistics"]["reference"]
        ref = ref if ref in frozen else sorted(frozen)[0]
        say(f"compare: timing {name} against {ref} on {ds} ({SPEED_ROUNDS} alternating rounds of "
            f"{SPEED_SECONDS:g} s each), to give {name} the tokens the published budget would have bought it")
        ms = alternating_ms(params, ds, [ref, name], device, SPEED_ROUNDS, SPEED_SECONDS)
        ratio = statistics.median(a / b for a, b in zip(ms[ref], ms[name]))
        tokens = max(1, round(frozen[ref] * ratio))
        params["datasets"][ds]["training"]["budget_tokens_by_method"] = {**frozen, name: tokens}
        out[ds] = {"reference": ref, "reference_tokens": int(frozen[ref]), "speed_ratio": ratio, "tokens": tokens,
                   "rounds": SPEED_ROUNDS, "ms_per_step": {m: statistics.median(v) for m, v in ms.items()}}
        say(f"compare: {name} steps {ratio:.3f}x as fast as {ref} here: {tokens:,} tokens "
            f"({ref}'s frozen {frozen[ref]:,} x {ratio:.3f})")
    return out


def write_params(params: dict, path: Path, head: str, against: str, name: str) -> None:
    """The comparison's params file, as Snakemake reads it (written whole or not at all)."""
    import yaml

    from ..io.atomic import atomic_path

    with atomic_path(path) as tmp:
        tmp.write_text(f"# made by python -m pipeline_src compare --head {head} --against {against}: "
                       f"benchmarks/{against}'s params with {name} added\n" + yaml.safe_dump(params, sort_keys=False))


def _publication_of_runs(against: str) -> Path:
    """``benchmarks/AGAINST``, refused in one line before anything runs unless it is a sealed publication of
    trained runs with their records (what ``restore`` brings back); the refusal names those that are."""
    from ..reporting.publish import check_name
    from ..reporting.seals import check_publication

    pub = check_name(against, "compare", "--against")
    usable = sorted(p.parent.parent.name for p in pub.parent.glob(f"*/records/{paths.RECORDS_MANIFEST}")
                    if (p.parent.parent / paths.PROVENANCE).is_file())  # published, not records stashed alone
    if not (pub / "records" / paths.RECORDS_MANIFEST).is_file() or not (pub / paths.PROVENANCE).is_file():
        what = ("no publication" if not pub.is_dir() else "records not yet published (a stash)"
                if (pub / "records").is_dir() else "a publication without records (a bench, or tables alone)")
        raise ConfigError(f"compare --against {against}: benchmarks/{against} is {what}; compare restores a "
                          f"publication's trained runs from its records: one of {', '.join(usable)}")
    check_publication(pub)  # an edited or unsealed copy: refused here, not after the training
    return pub


def _methods(params: dict) -> set[str]:
    return {m for _, m in run_pairs(params)}


def run_compare(params: dict, params_file: Path, against: str, head: str, cores: int | None = None,
                say=print) -> Path:
    """Prepare the data, give the new head its frozen tokens (:func:`scale_frozen_tokens`), restore the
    publication's records, train and evaluate what is missing (the new head's runs), bench it, summarise
    (partial: no matrix experiment) and render the card; returns the card's path. Says what it does as it goes."""
    from ..io.atomic import write_json
    from ..io.runtime import resolve_device
    from ..reporting.card import render_card
    from ..reporting.publish import check_name
    from ..reporting.summarize import summarize
    from .stash import restore

    root = paths.REPOSITORY
    snake = [sys.executable, "-m", "snakemake", "--cores", str(cores or "all")]
    new = [m for m in _methods(params) if m not in read_json(
        check_name(against) / paths.PROVENANCE, "params")["params"]["methods"]]
    prepared = [str(paths.prepared_dir(params, d)) for d in run_datasets(params)]
    _snakemake([*snake, *prepared, "--config", f"params={params_file}"], root, "prepare the data", say)
    scaled = scale_frozen_tokens(params, new[0], resolve_device(params.get("device", "auto")), say)
    write_params(validate(params, "compare"), params_file, head, against, new[0])
    write_json(Path(params["results_dir"]) / "scaled-tokens.json", scaled)
    n, stale = restore(params, check_name(against, "compare", "--against"), say=say)
    if stale:
        raise ConfigError(f"compare --against {against}: {len(stale)} published records are not what the current "
                          f"code makes of their config (first: {stale[0]}); rerun and republish {against} first")
    say(f"compare: restored {n} published records; training and evaluating {new[0]}'s runs")
    targets = [str(paths.metrics_path(params, d, m, s)) for d, m in run_pairs(params) for s in run_seeds(params)]
    targets += [str(paths.bench_path(params))]
    _snakemake([*snake, *targets, "--config", f"params={params_file}"], root, f"train and evaluate {new[0]}", say)
    say("compare: summarising and rendering the card")
    summarize(params, partial=True, one_machine=False)  # the new head may run elsewhere: the card says so
    return render_card(params, params_file, against, new[0], scaled)


def _snakemake(cmd: list[str], cwd: Path, what: str, say=print) -> None:
    """Snakemake, its progress lines ("3 of 9 steps (33%) done") passed on as they come, the rest kept for an
    error's last lines."""
    import re

    lines = []
    with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            lines.append(line.rstrip())
            if re.search(r"\d+ of \d+ steps \(\d+%\) done", line):
                say(f"compare: {what}: {line.strip()}")
    if proc.returncode != 0:
        tail = "\n".join(lines[-15:])
        raise ConfigError(f"compare: snakemake failed to {what} (exit {proc.returncode}); its last lines:\n{tail}")
