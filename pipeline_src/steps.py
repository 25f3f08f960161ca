"""The pipeline's own steps behind ``python -m pipeline_src``: what Snakemake's rules and DVC's stages call (fetch,
prepare, train, select, evaluate, reference, summarize, figures, report, matrix) and the params file's checks
(check-config, resolve, hashes). Each takes the validated params and the parsed arguments (:mod:`cli`)."""
from __future__ import annotations

from pathlib import Path

from .config import ConfigError, chain
from .io import paths
from .io.artifacts import read_csv, read_json


def _fetch(params: dict, args) -> None:
    from .data.fetch import fetch_dataset

    fetch_dataset(params, args.dataset)


def _prepare(params: dict, args) -> None:
    from .config import data_config
    from .data.checks import check_raw
    from .data.prepare import prepare

    from .config.runs import evaluation_config

    out = paths.prepared_dir(params, args.dataset)
    eval_bs = evaluation_config(params, args.dataset)["batch_size"]
    meta = prepare(check_raw(params, args.dataset), out, data_config(params, args.dataset), eval_bs)
    counts = ", ".join(f"{s} {v['tokens']:,}" for s, v in meta["splits"].items())
    print(f"wrote {out}: vocabulary {meta['vocab_size']:,}; tokens {counts}")


def _device(params: dict, args):
    from .io.runtime import resolve_device, set_threads

    set_threads(getattr(args, "threads", None))
    return resolve_device(params["device"])


def _train(params: dict, args) -> None:
    from .config.runspec import resolve_run
    from .data.checks import check_prepared
    from .training.loop import train

    spec = resolve_run(params, args.dataset, args.method, seed=args.seed, trial=args.trial)
    cfg, out, what = spec.config, spec.out_dir, spec.label
    summary = train(cfg, check_prepared(params, args.dataset), out, _device(params, args),
                    trial=args.trial is not None)
    if summary["status"] == "diverged":
        print(f"{what}: diverged ({summary['diverged']['reason']}); recorded as a tuning result")
    else:
        print(f"trained {what}: best valid nll {summary['best_valid_nll']:.4f}, "
              f"{summary['tokens_per_s_train']:.0f} train tokens/s")


def _finetune(params: dict, args) -> None:
    from .config.runspec import final_config
    from .data.checks import check_prepared
    from .training.checkpoints import check_model, load_torch
    from .training.loop import finetune_config, train

    cfg = final_config(params, args.dataset, args.method, args.seed)
    if not cfg["training"].get("finetune_epochs"):
        raise ConfigError(f"{args.config}: key 'training.finetune_epochs' is 0 for {args.dataset}/{args.method}: "
                          f"nothing to finetune")
    run = paths.run_dir(params, args.dataset, args.method, args.seed)
    retrain = f"python -m pipeline_src train --dataset {args.dataset} --method {args.method} --seed {args.seed}"
    check_model(run / paths.MODEL, load_torch(run / paths.MODEL, "cpu", f"rerun `{retrain}`"), cfg, retrain)
    if cfg["training"]["optimizer"] != "sgd":
        print(f"finetuning with {cfg['training']['optimizer']}: {cfg['training']['optimizer']} steps with the NT-ASGD "
              f"average of the weights from the first step, not averaged SGD (Merity et al.'s finetuning is SGD)")
    device = _device(params, args)
    s = train(finetune_config(cfg), check_prepared(params, args.dataset),
              paths.finetune_dir(params, args.dataset, args.method, args.seed), device, init=run / paths.MODEL)
    print(f"finetuned {args.dataset}/{args.method} seed {args.seed}: valid nll {s['start_valid_nll']:.4f} -> "
          f"{s['best_valid_nll']:.4f} (kept epoch {s['best_epoch']}; 0 = the trained weights)")


def _select(params: dict, args) -> None:
    from .config.runspec import selection_key, trials
    from .config.tuning import select

    specs = trials(params, args.dataset, args.method)
    sel = select(params, args.dataset, args.method, specs, selection_key(params, args.dataset, args.method, specs))
    print(f"{args.dataset}/{args.method}: {sel['summary']}")


def _evaluate(params: dict, args) -> None:
    from .evaluation.run import evaluate_run

    splits = evaluate_run(params, args.dataset, args.method, args.seed, _device(params, args), args.config)
    if "rank" in splits:
        r = splits["rank"]
        print(f"{args.dataset}/{args.method}: log-prob matrix rank {r['rank']} over {r['contexts']} contexts "
              f"(head input d = {r['head_dim']}; a softmax with bias is bounded by d + 2 = {r['softmax_bound']}); "
              f"relative distance from rank {r['softmax_bound']}: {r['residual_beyond_bound']:.3g}")
    if "argmax" in splits:
        a, e = splits["argmax"], splits["argmax"]["exact"]
        exact = (f"{e['unargmaxable']} of {e['words']} words unargmaxable ({e['lp_solved']} left to the LP after the "
                 f"cheap check, {e['lp_s']:.2f} s)" if "unargmaxable" in e else e.get("why") or e.get("skipped"))
        print(f"{args.dataset}/{args.method}: {exact}; {a['reached']} words are the argmax of some test context")
    for split, m in ((s, m) for s, m in splits.items() if s not in ("rank", "argmax")):
        extra = f" (truth {m['true_nll']:.4f})" if "true_nll" in m else ""
        print(f"{args.dataset}/{args.method} {split}: nll {m['nll']:.4f}{extra}, ppl {m['ppl']:.2f}")


def _reference(params: dict, args) -> None:
    from .data.checks import check_prepared
    from .evaluation.reference import write_reference

    if args.name not in params.get("references", {}):
        raise ConfigError(f"{args.config}: no reference {args.name!r} under references: "
                          f"(defined: {sorted(params.get('references', {})) or 'none'})")
    check_prepared(params, args.dataset)
    print(f"wrote {write_reference(params, args.dataset, args.name)}")


def _summarize(params: dict, args) -> None:
    from .reporting.summarize import summarize

    df = summarize(params, partial=args.partial)
    head = read_csv(paths.headline_path(params), "dataset", "method", "ppl")
    print(f"wrote {paths.summary_path(params)} ({len(df)} rows: runs x splits) and its tables; lowest mean test "
          f"perplexity per dataset: " + ", ".join(f"{ds} {g.loc[g.ppl.idxmin(), 'method']} {g.ppl.min():.1f}"
                                                  for ds, g in head.groupby("dataset", sort=False)))
    if args.partial:
        info = read_json(paths.summary_path(params).with_suffix(".json"), "runs", "of", "missing")
        print(f"summarised {info['runs']} of {info['of']} runs; missing: {', '.join(info['missing']) or 'none'}")


def _report(params: dict, args) -> None:
    from .reporting.report import render, render_publication

    if args.name:  # a publication's committed tables: no data, no training
        print(f"wrote {render_publication(args.name, Path(params['results_dir']) / 'reports')}")
        return
    render(params, Path(args.config))
    print(f"wrote {paths.report_path(params)}")


def _figures(params: dict, args) -> None:
    from .reporting.figures import write

    for path in write(params, args.dataset):
        print(f"wrote {path}")


def _matrix(params: dict, args) -> None:
    from .config.runs import run_seeds
    from .evaluation.matrix import run

    m = params["matrix"]
    for flag, value, allowed, key in (("--vocab", args.vocab, m["vocab_sizes"], "matrix.vocab_sizes"),
                                      ("--dim", args.dim, m["dims"], "matrix.dims"),
                                      ("--seed", args.seed, run_seeds(params), "run.seeds")):
        if value not in allowed:  # a fit no summary reads (and at 10^11 words, out of memory)
            raise ConfigError(f"{flag} {value} is not one of {key} {list(allowed)}: the summary reads only those; "
                              f"add it there first")
    _device(params, args)  # threads; the fits are small and run on the CPU
    run(params, args.vocab, args.dim, args.seed, paths.matrix_fit_path(params, args.vocab, args.dim, args.seed))


RESOLVED_MARK = "laid out by `python -m pipeline_src resolve`"  # the first line of what resolve writes


def _digest(body: str) -> str:
    import hashlib

    return hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]


def _resolved_unedited(text: str) -> bool:
    """Whether ``text`` is what ``resolve`` wrote, unedited: its first line names resolve and the digest of
    the rest (an edit of a committed, resolved params.yaml is kept like any other)."""
    first, _, body = text.partition("\n")
    return RESOLVED_MARK in first and first.rstrip().endswith(f"(sha256 {_digest(body)})")


def _resolve(params: dict, args) -> None:
    import yaml

    from .config import schema
    from .config.loading import is_params_file
    from .io.atomic import check_file_output, write_text
    from .io.errors import OutputError

    body = yaml.safe_dump(params, sort_keys=False, allow_unicode=True)
    text = (f"# {args.config} with its extends: chain {RESOLVED_MARK}; edit that file, not this one "
            f"(sha256 {_digest(body)})\n" + body)
    if not args.out:
        print(text, end="")
        return
    from .io.tracked import allow_tracked, repository_of, uncommitted

    inputs = [f.resolve() for f in chain(args.config)]
    out = Path(args.out).resolve()
    root = repository_of(out)
    # the one committed file it exists to write: the checkout's params.yaml (the documented DVC step), or with
    # --overwrite-config the params file it was asked to resolve
    ok = (root is not None and out == root / "params.yaml") or (args.overwrite_config and out == inputs[0])
    own = out.is_file() and _resolved_unedited(out.read_text(errors="replace"))  # resolve's output, as it wrote it
    in_place = args.overwrite_config and out == inputs[0]  # the edit is what it lays out: nothing is lost
    if ok and not own and not in_place and uncommitted(out):  # it would replace an edit git does not have yet
        raise OutputError(f"resolve --out {args.out}: it holds uncommitted changes (`git diff HEAD {args.out}`) "
                          f"that replacing it would lose; commit them, or discard them (`git checkout HEAD -- "
                          f"{args.out}`), then rerun")
    with allow_tracked(*([out] if ok else [])):
        if out in inputs:
            if out != inputs[0] or not args.overwrite_config:
                what = "the params file" if out == inputs[0] else "a base file of its extends: chain"
                raise OutputError(f"resolve --out {args.out} is {what} it reads: refusing to overwrite an input"
                                  + (" (add --overwrite-config to replace --config with its resolved form)"
                                     if what == "the params file" else ""))
        check_file_output(args.out)
        if Path(args.out).is_file() and not is_params_file(Path(args.out), set(schema()["properties"])):
            raise OutputError(f"resolve --out {args.out} exists and is not a params file (a YAML mapping of params "
                              f"keys): refusing to replace it with one; choose another path")
        write_text(args.out, text)
    print(f"wrote {args.out}")


def _hashes(params: dict, args) -> None:
    from .records.hashes import record_hashes

    written = record_hashes(params)
    print(f"{paths.hashes_dir(params)}: {len(written)} hash file(s) changed" +
          "".join(f"\n  {p}" for p in written))


def _check(params: dict, args) -> None:
    extra = params["run"]["extra"]
    also = f"; and {extra['datasets']} x {extra['methods']}" if extra["datasets"] else ""
    print(f"{args.config}: valid; runs: {params['run']['datasets']} x {params['run']['methods']}{also}")
    if Path(args.config).name == "params.yaml" and len(chain(args.config)) > 1:  # what dvc repro would meet
        print(f"note: {args.config} extends {chain(args.config)[1]}; Snakemake and the CLI lay the chain out, but "
              f"`dvc repro` reads params.yaml as written and stops with \"Could not find 'run.datasets'\": write "
              f"the laid-out file first (`python -m pipeline_src resolve --config {args.config} --out "
              f"{args.config} --overwrite-config`, or resolve another config onto it)")
