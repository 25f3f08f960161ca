"""``python -m pipeline_src <step>``: the one entry point Snakemake, DVC and users call.

Every step reads the same params file (``--config``, default ``params.yaml``), validates it,
and writes its outputs atomically under the paths in :mod:`pipeline_src.io.paths`.
"""
from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path

from .arguments import _int, _positive_int, _seconds
from .config import ConfigError, load, run_seeds
from .io import paths
from .io.artifacts import read_json
from .io.errors import PipelineError


def _fetch(params: dict, args) -> None:
    from .data.fetch import fetch_dataset

    fetch_dataset(params, args.dataset)


def _prepare(params: dict, args) -> None:
    from .config import data_config
    from .data.checks import check_raw
    from .data.prepare import prepare

    out = paths.prepared_dir(params, args.dataset)
    meta = prepare(check_raw(params, args.dataset), out, data_config(params, args.dataset))
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

    splits = evaluate_run(params, args.dataset, args.method, args.seed, _device(params, args))
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
    print(df.to_string(index=False))
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


def _bench(params: dict, args) -> None:
    from .cost.bench import run_bench

    run_bench(params, _device(params, args), quick=args.quick)


def _bench_step(params: dict, args) -> None:
    from .cost.stepbench import run_step_bench

    run_step_bench(params, _device(params, args))


def _check_head(params: dict, args) -> None:
    """The conformance kit (heads/conformance.py) on one head: a method of the params file, a registered head type,
    or a head from outside the repository (heads/plugins.py); one line a property, exit 1 on a failure."""
    import yaml

    from .config import validate
    from .heads.conformance import check
    from .heads.options import options_of

    if args.head in params["methods"]:
        spec = dict(params["methods"][args.head])
    else:
        spec = {"type": args.head}
    for item in args.option:
        key, eq, value = item.partition("=")
        if not eq:
            raise ConfigError(f"--option {item!r}: write key=value (e.g. --option negatives=20)")
        spec[key] = yaml.safe_load(value)
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


def _bench_cells(params: dict, args) -> None:
    from .cost.cells import run_cell_bench

    run_cell_bench(params, _device(params, args))


def _bench_samplers(params: dict, args) -> None:
    from .cost.samplers import run_sampler_bench

    run_sampler_bench(params, _device(params, args), args)


def _matrix(params: dict, args) -> None:
    from .evaluation.matrix import run

    _device(params, args)  # threads; the fits are small and run on the CPU
    run(params, args.vocab, args.dim, args.seed, paths.matrix_fit_path(params, args.vocab, args.dim, args.seed))


def _publish(params: dict, args) -> None:
    from .reporting.publish import publish

    out = publish(params, Path(args.config), args.name, args.wall_time_s, replace=args.replace)
    print(f"published {params['results_dir']} to {out}; README/docs tables regenerated: commit both")


def _freeze_budgets(params: dict, args) -> None:
    from .records.budgets import frozen_budgets

    print(frozen_budgets(args.name), end="")


def _stash(params: dict, args) -> None:
    from .records.stash import stash
    from .reporting.publish import check_name, check_stash

    out = check_name(args.name, "stash")
    check_stash(out, args.config, args.replace)
    n, kept, stale = stash(params, args.config, out)
    if n == 0:
        print(f"nothing to stash: {params['results_dir']} holds no finished, current record of {args.config}; "
              f"{out / 'records'} left as it is ({kept} records)"
              + "".join(f"\n  left out (stale): {s}" for s in stale))
        return
    print(f"stashed {n} current records of {params['results_dir']} in {out / 'records'}"
          + (f", beside {kept} earlier ones still current" if kept else "") + ": commit them"
          + "".join(f"\n  left out (stale): {s}" for s in stale))


def _restore(params: dict, args) -> None:
    from .records.stash import restore
    from .reporting.publish import check_name

    src = check_name(args.name, "restore")
    if not (src / "records" / paths.RECORDS_MANIFEST).is_file():
        raise ConfigError(f"restore --name {args.name}: {src / 'records'} holds no stash (no records.json); "
                          f"stashes: {sorted(p.parent.parent.name for p in src.parent.glob('*/records/records.json'))}")
    n, stale = restore(params, src)
    print(f"restored {n} records from {src / 'records'} into {params['results_dir']}; `snakemake` plans what is "
          f"left" + "".join(f"\n  not restored: {s}" for s in stale))


def _restate(params: dict, args) -> None:
    from .reporting.publish import restate

    source = Path(args.config)
    if args.as_published:  # the statistics it was published with: a change of the statistics' code alone
        import copy

        from .config import validate
        from .io.artifacts import read_json
        from .io.paths import PROVENANCE
        from .reporting.publish import check_name

        from .io.paths import REPOSITORY

        source = (check_name(args.name) / PROVENANCE).relative_to(REPOSITORY)  # recorded as a repository path
        params = validate(copy.deepcopy(read_json(REPOSITORY / source, "params")["params"]), str(source))
    out = restate(params, source, args.name)
    print(f"restated {out}: headline.csv and contrasts.csv recomputed from its summary.csv under "
          f"{source}'s statistics; README/docs tables regenerated: commit both")


def _resolve(params: dict, args) -> None:
    import yaml

    from .config import chain, schema
    from .config.loading import is_params_file
    from .io.atomic import check_file_output, write_text
    from .io.errors import OutputError

    text = (f"# {args.config} with its extends: chain laid out by `python -m pipeline_src resolve`; edit that "
            f"file, not this one\n" + yaml.safe_dump(params, sort_keys=False, allow_unicode=True))
    if not args.out:
        print(text, end="")
        return
    check_file_output(args.out)
    inputs = [f.resolve() for f in chain(args.config)]
    if Path(args.out).resolve() in inputs:
        if Path(args.out).resolve() != inputs[0] or not args.overwrite_config:
            what = "the params file" if Path(args.out).resolve() == inputs[0] else "a base file of its extends: chain"
            raise OutputError(f"resolve --out {args.out} is {what} it reads: refusing to overwrite an input"
                              + (" (add --overwrite-config to replace --config with its resolved form)"
                                 if what == "the params file" else ""))
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


COMMANDS = {
    "check-config": (_check, "validate the params file", ()),
    "resolve": (_resolve, "write the params file with its extends: chain laid out (DVC reads params.yaml as is)", ()),
    "hashes": (_hashes, "write the hash files of every step's settings that changed (inputs of the Snakemake rules "
               "and DVC stages: a run whose settings changed is rebuilt, whichever tool made it)", ()),
    "fetch": (_fetch, "download/verify (or generate) a dataset's raw text", ("dataset",)),
    "prepare": (_prepare, "tokenize, build the vocabulary, encode, build noise distributions", ("dataset",)),
    "train": (_train, "train one method on one dataset at one seed, or one tuning trial (resumes from its checkpoint)",
              ("dataset", "method")),
    "finetune": (_finetune, "finetune a trained run (training.finetune_epochs): averaged SGD from its weights",
                 ("dataset", "method", "seed")),
    "select": (_select, "pick a method's best tuning trial by validation perplexity (tuning.enabled)",
               ("dataset", "method")),
    "evaluate": (_evaluate, "exact valid/test perplexity of a trained run", ("dataset", "method", "seed")),
    "reference": (_reference, "fit and score a count-based reference (references.NAME: Kneser-Ney) on one dataset",
                  ("dataset", "name")),
    "summarize": (_summarize, "collect all runs' metrics into results/summary.csv", ()),
    "figures": (_figures, "draw a dataset's headline figures (forest, Pareto, learning curves) as SVG files",
                ("dataset",)),
    "report": (_report, "execute the report notebook and render results/report.html", ()),
    "bench": (_bench, "time and measure memory of every output layer against the matmul floor", ()),
    "bench-step": (_bench_step, "time whole training steps against their floor and the PyTorch example's step "
                   "(bench.step)", ()),
    "check-head": (_check_head, "hold one output layer (a method, a head type, or 'module:Class' / 'file.py:Class' "
                   "from outside) to the contract on small random shapes: one line a property, exit 1 on a failure",
                   ()),
    "bench-cells": (_bench_cells, "time each sweep cell's whole training step (its shapes, optimizer and options) "
                    "against the step's own floor, and the tokens its time budget buys (bench.cells)", ()),
    "bench-samplers": (_bench_samplers, "the kernel proposal's rebuild and draw costs at bench.vocab_sizes, and with "
                       "--model the sampled softmax's gradient bias per proposal and sample size", ()),
    "publish": (_publish, "copy a finished run's tables to benchmarks/NAME with provenance; regenerate README tables",
                ("name",)),
    "restate": (_restate, "recompute a publication's headline and contrasts from its committed per-run rows "
                "(benchmarks/NAME/summary.csv) under the params file's statistics; no retraining", ("name",)),
    "freeze-budgets": (_freeze_budgets, "print the training.budget_tokens_by_method block that replays a publication's "
                       "time budgets as each method's tokens (its calibration as comments): the same runs anywhere",
                       ("name",)),
    "stash": (_stash, "copy every finished, current record (trials, selections, final runs under keep_models: false, "
              "references) to benchmarks/NAME/records with their sha256: a long run resumes in another clone", ("name",)),
    "restore": (_restore, "put benchmarks/NAME/records back under results_dir, each checked against its sha256 and "
                "the current config; Snakemake then runs only what is missing", ("name",)),
    "matrix": (_matrix, "fit every matrix.methods head to one synthetic target matrix (M = vocab, d = dim)",
               ("vocab", "dim", "seed")),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline_src", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name, (_, help_, needs) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("--config", default="params.yaml", help="params file (default: params.yaml)")
        for arg in needs:
            sp.add_argument(f"--{arg}", required=True, type={"vocab": _positive_int, "dim": _positive_int,
                                                              "seed": _int}.get(arg, str))
        if name == "train":
            sp.add_argument("--seed", type=_int, default=None, help="run seed of a final run (one of run.seeds)")
            sp.add_argument("--trial", type=_int, default=None, help="index of a tuning trial (0 .. tuning.trials - 1)")
        if name in ("train", "finetune", "evaluate", "bench", "bench-samplers", "matrix"):  # bench-step sets its own (bench.step.threads)
            sp.add_argument("--threads", type=_positive_int, default=None,
                            help="torch CPU threads (Snakemake passes the job's threads; default: torch's choice)")
        if name == "publish":
            sp.add_argument("--wall-time-s", type=_seconds, default=None,
                            help="the run's wall time, as measured by whoever ran it (recorded in provenance.json)")
            sp.add_argument("--replace", action="store_true",
                            help="publish over a publication made from another params file")
        if name == "check-head":
            sp.add_argument("head", help="a method of --config, a head type, or 'module:Class' / 'path/file.py:Class'")
            sp.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                            help="set one of the head's options (repeatable)")
        if name == "report":
            sp.add_argument("--name", default=None,
                            help="render benchmarks/NAME's report from its committed tables (no data, no training) "
                                 "into results_dir/reports/NAME.html")
        if name == "restate":
            sp.add_argument("--as-published", action="store_true",
                            help="under the params recorded in its provenance.json (the statistics' code changed, "
                                 "not its settings), instead of --config")
        if name == "stash":
            sp.add_argument("--replace", action="store_true",
                            help="stash into a publication or stash made from another params file")
        if name == "resolve":
            sp.add_argument("--out", default=None, help="write here (e.g. params.yaml for dvc repro); default: stdout")
            sp.add_argument("--overwrite-config", action="store_true",
                            help="allow --out to be --config itself (replaces it with its resolved form)")
        if name == "summarize":
            sp.add_argument("--partial", action="store_true",
                            help="summarise the finished runs only; the missing ones are listed in summary.json")
        if name == "bench":
            sp.add_argument("--quick", action="store_true", help="small sizes, for tests")
        if name == "bench-samplers":
            sp.add_argument("--positions", type=_positive_int, default=64 * 35, help="contexts a step draws for")
            sp.add_argument("--kernel", default="sampled-softmax-kernel", help="the kernel proposal's method name")
            sp.add_argument("--unigram", default="sampled-softmax", help="the unigram proposal's method name")
            sp.add_argument("--model", default=None, help="a trained run's model.pt (softmax head) for the bias curve")
            sp.add_argument("--dataset", default=None, help="the model's dataset (its validation contexts)")
            sp.add_argument("--bias-positions", type=_positive_int, default=256)
            sp.add_argument("--sizes", type=_positive_int, nargs="+", default=[1, 4, 16, 64])
            sp.add_argument("--reps", type=_positive_int, default=40)
    return p


def _out_of_memory(e: BaseException) -> bool:
    """torch's allocation failures: MemoryError, torch.OutOfMemoryError (a RuntimeError), or the CPU allocator's
    RuntimeError ("can't allocate memory")."""
    text = str(e).lower()
    return isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError" or "can't allocate memory" in text \
        or "out of memory" in text


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from .data.corpora import CorpusError
    from .data.prepare import CorpusContentError
    from .io.errors import Diverged, ResumeError, Stopped

    try:
        params = load(args.config)
        paths.check_outside_repository(params, args.config)
        if getattr(args, "dataset", None) is not None and args.dataset not in params["datasets"]:
            raise ConfigError(f"{args.config}: unknown dataset {args.dataset!r}; defined: {sorted(params['datasets'])}")
        if getattr(args, "method", None) is not None and args.method not in params["methods"]:
            raise ConfigError(f"{args.config}: unknown method {args.method!r}; defined: {sorted(params['methods'])}")
        if args.command in ("evaluate", "finetune") and args.seed not in run_seeds(params):
            raise ConfigError(f"{args.config}: --seed {args.seed} is not one of run.seeds {run_seeds(params)}")
        COMMANDS[args.command][0](params, args)
    except (PipelineError, CorpusError, CorpusContentError, ResumeError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # disk full, quota, read-only or permission-denied output (nothing half-written stays)
        where = f" writing {e.filename}" if e.filename else ""
        hint = "; free some space and rerun" if e.errno in (errno.ENOSPC, errno.EDQUOT) else ""
        print(f"error: {args.command}{where}: {e.strerror or e}{hint}", file=sys.stderr)
        return 2
    except Diverged as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    except Stopped as e:
        print(f"{e}", file=sys.stderr)
        return 128 + e.signum  # the shell's convention for "killed by signal N"
    except (MemoryError, RuntimeError) as e:  # after Diverged and Stopped, RuntimeErrors of their own
        if not _out_of_memory(e):
            raise
        first = (str(e).strip().splitlines() or ["MemoryError"])[0][:160]
        print(f"error: {args.command}: out of memory ({first}): the model, batch or matrix is too large for this "
              f"machine; reduce model.emb_dim / hidden_dim, training.batch_size, evaluation.batch_size or "
              f"matrix.dims", file=sys.stderr)
        return 2
    return 0
