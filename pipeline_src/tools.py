"""The tools around the pipeline behind ``python -m pipeline_src``: the benches (bench, bench-step, bench-cells,
bench-samplers), the conformance kit (check-head), and publications and records (publish, restate, freeze-budgets,
stash, restore). Each takes the validated params and the parsed arguments (:mod:`cli`)."""
from __future__ import annotations

import math

from pathlib import Path

from .config import ConfigError
from .io import paths
from .steps import _device


def _bench(params: dict, args) -> None:
    from .cost.bench import run_bench

    run_bench(params, _device(params, args), quick=args.quick)


def _bench_step(params: dict, args) -> None:
    from .cost.stepbench import run_step_bench

    run_step_bench(params, _device(params, args))


def _options(items: list[str]) -> dict:
    """``--option key=value`` (repeatable), each value read as YAML (20, 0.5, true, [1, 2], log_k)."""
    import yaml

    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ConfigError(f"--option {item!r}: write key=value (e.g. --option negatives=20)")
        if key in out:
            raise ConfigError(f"--option {item!r}: {key} is already set ({key}={out[key]!r}); give each option once")
        out[key] = yaml.safe_load(value)
    return out


def _check_head(params: dict, args) -> None:
    """The conformance kit (heads/conformance.py) on one head: a method of the params file, a registered head type,
    or a head from outside the repository (heads/plugins.py); one line a property, exit 1 on a failure."""
    from .config import validate
    from .heads.conformance import check
    from .heads.options import options_of

    if args.head in params["methods"]:
        spec = dict(params["methods"][args.head])
    else:
        spec = {"type": args.head}
    spec.update(_options(args.option))
    options_of(spec["type"])  # a missing module or a class that is no output layer: one line
    validate({**params, "methods": {**params["methods"], "checked": spec}}, f"check-head {args.head}")
    results = check(spec)
    for r in results:
        print(r.line())
    failed = [r.prop for r in results if r.ok is False]
    print(f"{spec['type']}: {len(results) - len(failed)} of {len(results)} properties hold"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    if failed:
        raise SystemExit(1)


def _admit(spec: dict, head: str) -> None:
    """Refuse, in one line, a head that fails a property of the conformance kit (``check-head``): its perplexity
    would not be a perplexity (an unnormalised head scores below the truth), so no comparison is drawn."""
    from .heads.conformance import check
    from .io.errors import ConfigError

    print(f"compare: holding {head} to the output-layer contract first (check-head) ...", flush=True)
    failed = [r for r in check(spec) if r.ok is False]
    if failed:
        raise ConfigError(f"compare --head {head}: fails check-head's property '{failed[0].prop}' "
                          f"({failed[0].line().strip()}){f' and {len(failed) - 1} more' if len(failed) > 1 else ''}"
                          f": run `python -m pipeline_src check-head {head}` and fix the head before comparing")


def _compare(params: dict, args) -> None:
    """A new head against a publication's rows (records/compare.py), its card at results/compare/<as>/card.html."""
    import os

    from .records.compare import compare_params, run_compare, write_params

    os.chdir(paths.REPOSITORY)  # where Snakemake runs it, a plugin's file path is read and results/ lies
    name = args.as_name or args.head.rsplit(":", 1)[-1].lower()
    cparams = compare_params(args.head, _options(args.option), args.against, name, args.datasets)
    _admit(cparams["methods"][name], args.head)  # the kit first: a head that breaks the contract is not ranked
    out = Path(cparams["results_dir"])
    out.mkdir(parents=True, exist_ok=True)
    params_file = out / "params.yaml"
    write_params(cparams, params_file, args.head, args.against, name)
    card = run_compare(cparams, params_file, args.against, args.head, args.cores, say=lambda m: print(m, flush=True))
    print(f"wrote {card.resolve()} ({name} against benchmarks/{args.against}; tables in {out.resolve()})")


def _bench_cells(params: dict, args) -> None:
    from .cost.cells import run_cell_bench

    run_cell_bench(params, _device(params, args))


def _profile(params: dict, args) -> None:
    """This machine's profile: each run method's training tokens/s at each run dataset's shapes (one short round
    of ``bench-cells``, on one thread as a training job runs, or ``--threads``), written to
    results_dir/profile/cell-bench.csv for ``advise --profile``."""
    import copy

    from .config import run_datasets
    from .cost.cells import run_cell_bench

    p = copy.deepcopy(params)
    p["bench"]["cells"] = {"datasets": run_datasets(p), "methods": list(p["run"]["methods"]), "min_seconds": 1,
                           "rounds": 1, "threads": args.threads or 1}  # a training job's, unless --threads says
    p["results_dir"] = str(Path(params["results_dir"]) / "profile")
    held = _ladders_held(tuned=True)  # the ladders whose picks these are
    datasets = run_datasets(p)
    picks = ladder_picks(datasets, list(p["run"]["methods"]))
    if any(picks.values()) and all(d in held for d in datasets):
        for m, options in picks.items():  # measured at the head options the published ladder trained with
            p["methods"][m] = {**p["methods"][m], **options}
        print(f"at the picks of {', '.join(sorted({held[d] for d in datasets}))}: " + "; ".join(
            f"{m} {', '.join(f'{k} {v}' for k, v in o.items())}" for m, o in picks.items() if o))
    elif any(picks.values()):  # one dataset's picks are no other's: measured at the params' options, said so
        print(f"at the params' head options: no published ladder holds {', '.join(d for d in datasets if d not in held)}"
              f", so the picks of the ladders holding {', '.join(d for d in datasets if d in held)} are not applied "
              f"(profile a config of those datasets alone for them)")
    table = run_cell_bench(p, _device(p, args))
    out = paths.cell_bench_path(p)
    print(table[["dataset", "method", "tokens_per_s"]].to_string(index=False))
    print(f"wrote {out}: {_advise_line(out, run_datasets(p))}")


def ladder_picks(datasets: list[str], methods: list[str]) -> dict[str, dict]:
    """The head options the published token ladders holding ``datasets`` picked for each of ``methods`` (their
    ``tuning.csv``); one line naming the method when two of those ladders picked differently."""
    from .io.artifacts import read_csv
    from .reporting.profiles import picked_options

    from .reporting.published_rows import check_digest

    held, picks = _ladders_held(tuned=True), {}
    for d in datasets:
        pub = paths.REPOSITORY / "benchmarks" / held.get(d, "")
        if d not in held or not (pub / "tuning.csv").is_file():
            continue
        check_digest(pub, "tuning.csv")  # an edited table is refused, as everywhere it is read
        for (ds, m), options in picked_options(read_csv(pub / "tuning.csv")).items():
            if ds != d or m not in methods:
                continue
            if m in picks and picks[m] != options:
                raise ConfigError(f"profile: the ladders picked {m} with {picks[m]} and {options} ({d}, "
                                  f"benchmarks/{held[d]}): profile one dataset's config at a time")
            picks[m] = options
    return picks


def _advise_line(profile: Path, datasets: list[str]) -> str:
    """The ``advise`` command that reads this profile: the first of ``datasets`` that a published token ladder
    holds, with that publication's name; or, where none does, which datasets the ladders hold."""
    held = _ladders_held()
    for d in datasets:
        if d in held:
            return (f"`python -m pipeline_src advise --profile {profile} --seconds 60 --dataset {d} --name {held[d]}` "
                    f"reads equal time on this machine")
    ladders = ", ".join(f"{d} ({n})" for d, n in sorted(held.items())) or "none yet"
    return (f"no published token ladder holds {', '.join(datasets)}, so `advise` has nothing to read this profile "
            f"against; the ladders hold: {ladders} (profile a config of those datasets, e.g. "
            f"config/token-axis.yaml)")


def _ladders_held(tuned: bool = False) -> dict[str, str]:
    """Each dataset a published token ladder holds -> the first such publication by name, a ladder that tuned its
    methods (a ``tuning.csv``: the picks) before one that did not (a rate check, a retune); ``tuned``: those only."""
    from .io.artifacts import read_csv

    held = {}
    files = sorted(_ladder_advice_files(), key=lambda f: not (f.parent / "tuning.csv").is_file())  # stable: by name
    for advice in (f for f in files if not tuned or (f.parent / "tuning.csv").is_file()):
        for d in read_csv(advice, "dataset")["dataset"].unique():
            held.setdefault(str(d), advice.parent.name)
    return held


def _ladder_advice_files() -> list[Path]:
    """The token-ladder publications' ladder-advice.csv, by publication name (what makes a publication a ladder)."""
    return sorted((paths.REPOSITORY / "benchmarks").glob("*/ladder-advice.csv"))


def _ladder_publication(name: str, command: str) -> Path:
    """The token-ladder publication ``name``, checked as published; else one line naming the ladders there are."""
    from .reporting.publish import check_name
    from .reporting.seals import check_publication

    pub = check_name(name, command)
    names = ", ".join(p.parent.name for p in _ladder_advice_files()) or "none yet"
    if not (pub / paths.PROVENANCE).is_file():
        raise ConfigError(f"{command} --name {name}: no publication {pub} (the token-ladder publications: {names}; "
                          f"a ladder of your own: train its config, then `python -m pipeline_src publish --name {name}`)")
    check_publication(pub)
    if not (pub / "ladder-advice.csv").is_file():
        raise ConfigError(f"{command} --name {name}: {pub} is not a token-ladder publication (no ladder-advice.csv: "
                          f"its runs have no rungs to read); one of: {names}")
    return pub


def _advise(params: dict, args) -> None:
    """What to use for ``--seconds`` of training on a profile's machine, read from a token-ladder publication."""
    from .io.artifacts import read_csv, read_json
    from .reporting.profiles import (advise, cell_shape, ladder_runs, load_profile, options_differ, outside_range,
                                     trained_options)
    from .reporting.tables import advice_markdown

    if args.name is None:  # the publication whose ladder holds the dataset
        held = _ladders_held()
        if args.dataset not in held:
            raise ConfigError(f"advise --dataset {args.dataset}: no published token ladder holds it; the ladders hold: "
                              f"{', '.join(f'{d} ({n})' for d, n in sorted(held.items())) or 'none yet'}")
        args.name = held[args.dataset]
    pub = _ladder_publication(args.name, "advise")
    profile, machine = load_profile(args.profile)
    published = read_json(pub / paths.PROVENANCE)["params"]
    confidence = (published.get("statistics") or {}).get("confidence", 0.95)
    shape = cell_shape(published, args.dataset)
    summary = read_csv(pub / "summary.csv")
    table, read = advise(read_csv(pub / "anytime.csv"), summary, profile, args.seconds, args.dataset, confidence, shape)
    print(f"{args.dataset}, {args.seconds:g} s of training steps on {args.profile} ({machine}); each seed read from "
          f"its ladder in benchmarks/{args.name} (log-token interpolation between measured rungs):")
    if len(read) and read.speed_from.iloc[0]:
        print(f"  (the profile has no row for {args.dataset}: each method's tokens/s {read.speed_from.iloc[0]})")
    tuning = read_csv(pub / "tuning.csv") if (pub / "tuning.csv").is_file() else None
    ran = trained_options(published, tuning, ladder_runs(summary, args.dataset))
    differ = options_differ(profile, {m: o for (_, m), o in ran.items()})
    if differ:
        print(f"  (tokens/s measured at other head options than the ladder trained with: {differ}; "
              f"those methods' tokens are those options')")
    inside = read[~read.outside & ~read.no_speed & read.test_nll.notna()]  # the readings the verdict rests on
    for m, r in sorted(read.groupby("method"), key=lambda g: (g[1].no_speed.any(), g[1].tokens.iloc[0])):
        mine = inside[inside.method == m]
        print(f"  {m}: " + ("no tokens/s on this profile: not read" if r.no_speed.any() else outside_range(r)
                            if mine.empty else f"{r.tokens.iloc[0]:,.0f} tokens, test ppl "
                                               f"{math.exp(mine.test_nll.mean()):,.1f} (read from the ladder)"))
    if table.empty:
        print("no method's tokens fall inside the measured rungs: no verdict")
        return
    print(advice_markdown(table), end="")
    left = sorted(set(read.method) - set(inside.method))
    if left:
        n = read.method.nunique()
        print(f"(chosen among the {n - len(left)} of {n} methods read inside their ladders; not read at "
              f"{args.seconds:g} s: {', '.join(left)})")


def _device_check(params: dict, args) -> None:
    """The token axis checked on this device (``reporting/device_check.py``)."""
    from .reporting.device_check import check, markdown
    from .io.runtime import resolve_device, set_threads

    pub = _ladder_publication(args.name, "device-check")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods or len(set(methods)) < len(methods):
        raise ConfigError(f"device-check --methods {args.methods!r}: name each method once, comma-separated "
                          f"(e.g. softmax,nce)")
    out = Path(args.out) if args.out else Path(params["results_dir"]) / "device-check"
    paths.check_output_folder(out, f"device-check --out {args.out!r}" if args.out else
                              f"device-check's folder {str(out)!r} (results_dir/device-check)")
    set_threads(args.threads)
    table = check(params, pub, args.dataset, methods, args.seconds, args.seed, args.profile, out,
                  resolve_device(params["device"]), args.calibrate_seconds)
    print(markdown(table), end="")
    print(f"wrote {out / 'device-check.csv'}")


def _bench_samplers(params: dict, args) -> None:
    from .cost.samplers import run_sampler_bench

    run_sampler_bench(params, _device(params, args), args)


def _publish(params: dict, args) -> None:
    from .reporting.publish import publish

    out = publish(params, Path(args.config), args.name, args.wall_time_s, replace=args.replace,
                  trained_at=args.trained_at)
    print(f"published {params['results_dir']} to {out}; README/docs tables regenerated: commit both")


def _plots_offline(params: dict, args) -> None:
    from .reporting.offline_plots import name_template, write_template

    template = write_template()
    print(f"wrote {template} and named it in {name_template(template)} (dvc plots show now draws without a network)")


def _freeze_settings(params: dict, args) -> None:
    from .records.budgets import frozen_settings

    print(frozen_settings(args.name, args.dataset), end="")


def _freeze_budgets(params: dict, args) -> None:
    from .records.budgets import frozen_budgets

    print(frozen_budgets(args.name), end="")


def _stash(params: dict, args) -> None:
    from .io.artifacts import read_json
    from .records.stash import stash
    from .reporting.publish import check_name, check_stash

    out = check_name(args.name, "stash")
    check_stash(out, params, args.config, args.replace)
    n, kept, stale = stash(params, args.config, out)
    if n == 0:
        print(f"nothing to stash: {params['results_dir']} holds no finished, current record of {args.config}; "
              f"{out / 'records'} left as it is ({kept} records)"
              + "".join(f"\n  left out (stale): {s}" for s in stale))
        return
    print(f"stashed {n} current records of {params['results_dir']} in {out / 'records'}"
          + (f", beside {kept} earlier ones still current" if kept else "") + ": commit them"
          + "".join(f"\n  left out (stale): {s}" for s in stale))
    finals = read_json(out / "records" / paths.RECORDS_MANIFEST, "files")["files"]
    finals = [rel for rel in finals if rel.startswith("runs/")]
    if finals and params.get("keep_models", True):  # the stash holds no model.pt
        print(f"note: the stash holds {len(finals)} final runs' files, which `restore` puts back only under "
              f"keep_models: false (keep_models is true in {args.config}: Snakemake would retrain a run restored "
              f"without its model.pt)")


def _restore(params: dict, args) -> None:
    from .io.errors import runnable_hints
    from .records.stash import not_asked_for, restore
    from .reporting.publish import check_name

    src = check_name(args.name, "restore")
    if not (src / "records" / paths.RECORDS_MANIFEST).is_file():
        raise ConfigError(f"restore --name {args.name}: {src / 'records'} holds no stash (no records.json); "
                          f"stashes: {sorted(p.parent.parent.name for p in src.parent.glob('*/records/records.json'))}")
    n, stale = restore(params, src)
    print(runnable_hints(f"restored {n} records from {src / 'records'} into {params['results_dir']}; `snakemake` "
                         f"runs what is left", args.config)
          + "".join(f"\n  not restored: {s}" for s in stale + not_asked_for(params, src)))


def _restate(params: dict, args) -> None:
    from .config import validate
    from .io.artifacts import read_json
    from .reporting.publish import restatable, restate

    prov = restatable(args.name)
    out = prov.parent
    if not args.as_published:
        source = Path(args.config)
    else:  # the statistics it was published with: a change of the statistics' code alone
        import copy

        source = prov.relative_to(paths.REPOSITORY) if prov.is_relative_to(paths.REPOSITORY) else prov
        params = validate(copy.deepcopy(read_json(prov, "params")["params"]), str(source))
    if not restate(params, source, args.name):  # every table came out as it is: restate said so
        return
    tables = read_json(out / paths.PROVENANCE)["restated"]["tables"]
    folders = {t.split("/", 1)[0] for t in tables if "/" in t}  # a folder of tables (headline-metrics/): named once
    shown = [t for t in tables if "/" not in t] + [f"{f}/ ({sum(t.startswith(f + '/') for t in tables)} files)"
                                                   for f in sorted(folders)]
    print(f"restated {out}: {', '.join(shown)} recomputed from its committed rows under {source}'s statistics "
          f"(and the hardware profiles as they are now); README/docs tables regenerated: commit both")
