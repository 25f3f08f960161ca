"""``python -m pipeline_src <step>``: the one entry point Snakemake, DVC and users call.

Every step reads the same params file (``--config``, default ``params.yaml``), validates it,
and writes its outputs atomically under the paths in :mod:`pipeline_src.paths`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import paths
from .config import ConfigError, load


def _fetch(params: dict, args) -> None:
    from .config import mirror_dir
    from .corpora import copy_local, fetch
    from .synthetic import generate

    corpus = params["datasets"][args.dataset]["corpus"]
    out = paths.raw_dir(params, args.dataset)
    if corpus["type"] == "synthetic":
        truth = generate(corpus, out, params["seed"])
        print(f"synthetic language: {truth['contexts']} contexts x {truth['vocab_size']} words, "
              f"true test ppl {truth['test_ppl']:.3f}, log-prob rank {truth['log_prob_rank']}")
    elif corpus["type"] == "local":
        copy_local(corpus, out)
    else:
        fetch(corpus["type"], out, mirror_dir(params))
    print(f"wrote {out}")


def _prepare(params: dict, args) -> None:
    from .config import data_config
    from .prepare import prepare

    out = paths.prepared_dir(params, args.dataset)
    meta = prepare(paths.raw_dir(params, args.dataset), out, data_config(params, args.dataset))
    counts = ", ".join(f"{s} {v['tokens']:,}" for s, v in meta["splits"].items())
    print(f"wrote {out}: vocabulary {meta['vocab_size']:,}; tokens {counts}")


def _device(params: dict, args):
    from .runtime import resolve_device, set_threads

    set_threads(args.threads)
    return resolve_device(params["device"])


def _train(params: dict, args) -> None:
    from .config import run_config
    from .train import train

    cfg = run_config(params, args.dataset, args.method)
    summary = train(cfg, paths.prepared_dir(params, args.dataset), paths.run_dir(params, args.dataset, args.method),
                    _device(params, args))
    print(f"trained {args.dataset}/{args.method}: best valid nll {summary['best_valid_nll']:.4f}, "
          f"{summary['tokens_per_s_train']:.0f} train tokens/s")


def _evaluate(params: dict, args) -> None:
    import json

    import torch

    from .evaluate import evaluate, write_metrics
    from .runtime import peak_memory_mb, reset_peak_memory
    from .train import build_model

    device = _device(params, args)
    run = paths.run_dir(params, args.dataset, args.method)
    ckpt = torch.load(run / "model.pt", map_location=device, weights_only=False)
    prepared = paths.prepared_dir(params, args.dataset)
    model = build_model(ckpt["config"], prepared).to(device)
    model.load_state_dict(ckpt["model"])
    reset_peak_memory(device)
    splits = evaluate(model, ckpt["config"], prepared, paths.raw_dir(params, args.dataset), device)
    summary = json.loads((run / "train.json").read_text())
    write_metrics(paths.metrics_path(params, args.dataset, args.method), summary, splits, args.dataset, args.method,
                  peak_memory_mb(device))
    if "rank" in splits:
        r = splits["rank"]
        print(f"{args.dataset}/{args.method}: log-prob matrix rank {r['rank']} over {r['contexts']} contexts "
              f"(head input d = {r['head_dim']}; a softmax with bias is bounded by d + 2 = {r['softmax_bound']})")
    for split, m in ((s, m) for s, m in splits.items() if s != "rank"):
        extra = f" (truth {m['true_nll']:.4f})" if "true_nll" in m else ""
        print(f"{args.dataset}/{args.method} {split}: nll {m['nll']:.4f}{extra}, ppl {m['ppl']:.2f}")


def _summarize(params: dict, args) -> None:
    from .summarize import summarize

    df = summarize(params)
    print(df.to_string(index=False))


def _report(params: dict, args) -> None:
    from .report import render

    render(params, Path(args.config))
    print(f"wrote {paths.report_path(params)}")


def _bench(params: dict, args) -> None:
    from .bench import run_bench

    run_bench(params, _device(params, args), quick=args.quick)


def _matrix(params: dict, args) -> None:
    from .matrix import run

    _device(params, args)  # threads; the fits are small and run on the CPU
    run(params, args.vocab, args.dim, paths.matrix_fit_path(params, args.vocab, args.dim))


def _check(params: dict, args) -> None:
    print(f"{args.config}: valid; runs: {params['run']['datasets']} x {params['run']['methods']}")


COMMANDS = {
    "check-config": (_check, "validate the params file", ()),
    "fetch": (_fetch, "download/verify (or generate) a dataset's raw text", ("dataset",)),
    "prepare": (_prepare, "tokenize, build the vocabulary, encode, build noise distributions", ("dataset",)),
    "train": (_train, "train one method on one dataset (resumes from its checkpoint)", ("dataset", "method")),
    "evaluate": (_evaluate, "exact valid/test perplexity of a trained run", ("dataset", "method")),
    "summarize": (_summarize, "collect all runs' metrics into results/summary.csv", ()),
    "report": (_report, "execute the report notebook and render results/report.html", ()),
    "bench": (_bench, "time and measure memory of every output layer against the matmul floor", ()),
    "matrix": (_matrix, "fit every matrix.methods head to one synthetic target matrix (M = vocab, d = dim)",
               ("vocab", "dim")),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline_src", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name, (_, help_, needs) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("--config", default="params.yaml", help="params file (default: params.yaml)")
        for arg in needs:
            sp.add_argument(f"--{arg}", required=True, type=int if arg in ("vocab", "dim") else str)
        if name in ("train", "evaluate", "bench", "matrix"):
            sp.add_argument("--threads", type=int, default=None,
                            help="torch CPU threads (Snakemake passes the job's threads; default: torch's choice)")
        if name == "bench":
            sp.add_argument("--quick", action="store_true", help="small sizes, for tests")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from .corpora import CorpusError
    from .train import ResumeError, Stopped

    try:
        params = load(args.config)
        if getattr(args, "dataset", None) is not None and args.dataset not in params["datasets"]:
            raise ConfigError(f"{args.config}: unknown dataset {args.dataset!r}; defined: {sorted(params['datasets'])}")
        if getattr(args, "method", None) is not None and args.method not in params["methods"]:
            raise ConfigError(f"{args.config}: unknown method {args.method!r}; defined: {sorted(params['methods'])}")
        COMMANDS[args.command][0](params, args)
    except (ConfigError, CorpusError, ResumeError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Stopped as e:
        print(f"{e}", file=sys.stderr)
        return 128 + e.signum  # the shell's convention for "killed by signal N"
    return 0
