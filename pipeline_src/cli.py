"""``python -m pipeline_src <step>``: the one entry point Snakemake, DVC and users call.

Every step reads the same params file (``--config``, default ``params.yaml``), validates it,
and writes its outputs atomically under the paths in :mod:`pipeline_src.io.paths`.
"""
from __future__ import annotations

import argparse
import errno
import sys

from .arguments import _int, _positive_int, _positive_seconds, _seconds, _threads
from .config import ConfigError, load, run_seeds
from .io import paths
from .io.errors import PipelineError
from .steps import (
    _check,
    _evaluate,
    _fetch,
    _figures,
    _finetune,
    _hashes,
    _matrix,
    _prepare,
    _reference,
    _report,
    _resolve,
    _select,
    _summarize,
    _train,
)
from .tools import (
    _bench,
    _bench_cells,
    _advise,
    _bench_samplers,
    _bench_step,
    _check_head,
    _compare,
    _device_check,
    _freeze_budgets,
    _freeze_settings,
    _plots_offline,
    _profile,
    _publish,
    _restate,
    _restore,
    _stash,
)

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
    "compare": (_compare, "train a new output layer under a publication's protocol beside its restored rows (no "
                "retraining of those) and write its comparison card: results/compare/AS/card.html", ()),
    "bench-cells": (_bench_cells, "time each sweep cell's whole training step (its shapes, optimizer and options) "
                    "against the step's own floor, and the tokens its time budget buys (bench.cells)", ()),
    "bench-samplers": (_bench_samplers, "the kernel proposal's rebuild and draw costs at bench.vocab_sizes, and with "
                       "--model the sampled softmax's gradient bias per proposal and sample size", ()),
    "profile": (_profile, "this machine's profile: each run method's training tokens/s at each run dataset's shapes "
                "(one short bench-cells round), for advise --profile", ()),
    "advise": (_advise, "what to use for --seconds of training on a profile's machine (cpu-thread, h100, or your "
               "own profile's cell-bench.csv), read from a token-ladder publication", ("dataset",)),
    "device-check": (_device_check, "train --methods for the same --seconds on this device (one seed, each with its "
                     "published run's settings, a one-rung ladder), score them, and set each beside the ladder's "
                     "reading at those tokens and at a profile's", ("dataset",)),
    "publish": (_publish, "copy a finished run's tables to benchmarks/NAME with provenance; regenerate README tables",
                ("name",)),
    "restate": (_restate, "recompute a publication's headline and contrasts from its committed per-run rows "
                "(benchmarks/NAME/summary.csv) under the params file's statistics; no retraining", ("name",)),
    "freeze-budgets": (_freeze_budgets, "print the training.budget_tokens_by_method block that replays a publication's "
                       "time budgets as each method's tokens (its calibration as comments): the same runs anywhere",
                       ("name",)),
    "freeze-settings": (_freeze_settings, "print the params block that replays a publication's tuning picks at one "
                        "dataset without tuning: each method with its picked options, training.lr_by_method, and its "
                        "frozen token budgets where it ran under a time budget", ("name", "dataset")),
    "stash": (_stash, "copy every finished, current record (trials, selections, final runs under keep_models: false, "
              "references) to benchmarks/NAME/records with their sha256: a long run resumes in another clone", ("name",)),
    "restore": (_restore, "put benchmarks/NAME/records back under results_dir, each checked against its sha256 and "
                "the current config; Snakemake then runs only what is missing", ("name",)),
    "plots-offline": (_plots_offline, "write the HTML template `dvc plots show` uses (.dvc/plots/offline.html, named in "
                      ".dvc/config.local) with Vega inlined, so its page draws without a network; make setup runs it", ()),
    "matrix": (_matrix, "fit every matrix.methods head to one synthetic target matrix (M = vocab, d = dim)",
               ("vocab", "dim", "seed")),
}


NO_PARAMS = {"compare", "plots-offline", "freeze-settings", "advise"}  # steps that read no params file of their own (compare: the publication's)
NEEDS_HELP = {  # the arguments several steps share
    "dataset": "a dataset defined under the params file's datasets:",
    "method": "a method defined under the params file's methods:",
    "seed": "a run seed (one of run.seeds)",
    "name": "the publication's folder under benchmarks/",
    "vocab": "M: the target matrix's vocabulary (columns)",
    "dim": "d: the context embeddings' dimension",
}


GROUPS = {  # how --help lists the commands
    "pipeline steps (what Snakemake and DVC run)": ("check-config", "resolve", "hashes", "fetch", "prepare", "train",
                                                    "finetune", "select", "evaluate", "reference", "summarize",
                                                    "figures", "report", "matrix"),
    "publications (benchmarks/NAME)": ("publish", "restate", "stash", "restore", "freeze-budgets", "freeze-settings",
                                       "advise"),
    "tools (timings, your own head, this machine)": ("bench", "bench-step", "bench-cells", "bench-samplers",
                                                     "profile", "device-check", "check-head", "compare",
                                                     "plots-offline"),
}


def _grouped_help() -> str:
    width = max(map(len, COMMANDS)) + 2
    out = []
    for title, names in GROUPS.items():
        out.append(f"{title}:")
        out += [f"  {n:<{width}}{COMMANDS[n][1][:110 - width]}{'...' if len(COMMANDS[n][1]) > 110 - width else ''}"
                for n in names]
    return "\n".join(out) + "\n\n`python -m pipeline_src COMMAND --help` for one command's options."


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline_src", description=__doc__.split("\n\n")[0],
                                epilog=_grouped_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", help="one of the commands below")
    for name, (_, help_, needs) in COMMANDS.items():
        sp = sub.add_parser(name, description=(help_[:1].upper() + help_[1:] + ".") if help_ else None)
        if name not in NO_PARAMS:
            sp.add_argument("--config", default="params.yaml", help="params file (default: params.yaml)")
        for arg in needs:
            sp.add_argument(f"--{arg}", required=True, type={"vocab": _positive_int, "dim": _positive_int,
                                                              "seed": _int}.get(arg, str),
                            help="a dataset of the publication" if name in NO_PARAMS and arg == "dataset"
                            else "a count-based reference of the params file's references: (e.g. kn)"
                            if name == "reference" and arg == "name" else NEEDS_HELP[arg])
        _step_options(sp, name)
        _tool_options(sp, name)
    return p


def _step_options(sp, name: str) -> None:
    """The options of the training, publication and tool commands (beyond --config and the ones they need)."""
    if name == "train":
        sp.add_argument("--seed", type=_int, default=None, help="run seed of a final run (one of run.seeds)")
        sp.add_argument("--trial", type=_int, default=None, help="index of a tuning trial (0 .. tuning.trials - 1)")
    if name in ("train", "finetune", "evaluate", "bench", "bench-samplers", "matrix", "profile", "device-check"):  # bench-step sets its own (bench.step.threads)
        sp.add_argument("--threads", type=_threads, default=None,
                        help="torch CPU threads (Snakemake passes the job's threads; default: torch's choice; "
                             "profile: 1, as a training job runs)")
    if name == "publish":
        sp.add_argument("--wall-time-s", type=_seconds, default=None,
                        help="the run's wall time, as measured by whoever ran it (recorded in provenance.json)")
        sp.add_argument("--replace", action="store_true",
                        help="publish over a publication made from another params file")
        sp.add_argument("--trained-at", default=None, metavar="COMMIT",
                        help="the commit whose code trained the runs, when not this one (a pinned worktree's)")
    if name == "check-head":
        sp.add_argument("head", help="a method of --config, a head type, or 'module:Class' / 'path/file.py:Class'")
        sp.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="set one of the head's options (repeatable)")
    if name == "compare":
        sp.add_argument("--head", required=True,
                        help="the new head: 'module:Class', 'path/file.py:Class' or a registered head type")
        sp.add_argument("--against", default="default",
                        help="the publication whose rows and protocol it joins (benchmarks/NAME; default: default)")
        sp.add_argument("--as", dest="as_name", default=None,
                        help="its method name in the tables (default: the class name, lower case)")
        sp.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="set one of the head's options (repeatable)")
        sp.add_argument("--datasets", nargs="+", default=None,
                        help="only these of the publication's datasets (default: all of them)")
        sp.add_argument("--cores", type=_positive_int, default=None,
                        help="jobs at once, as `snakemake --cores` (default: all); each job trains on one thread")
    if name == "advise":
        sp.add_argument("--profile", required=True, help="cpu-thread, h100, or a cell-bench.csv from `profile`")
        sp.add_argument("--seconds", required=True, type=_positive_seconds, help="training seconds on that machine")
        sp.add_argument("--name", default=None,
                        help="the token-ladder publication (default: the one whose ladder holds --dataset)")
    if name == "device-check":
        sp.add_argument("--methods", required=True, help="comma-separated methods of the publication's ladders")
        sp.add_argument("--seconds", required=True, type=_positive_seconds,
                        help="training seconds each, on this device")
        sp.add_argument("--seed", type=_int, default=1, help="the published run whose settings train (default 1)")
        sp.add_argument("--name", default="token-axis", help="the token-ladder publication (default token-axis)")
        sp.add_argument("--profile", default="h100", help="the profile read beside (default h100)")
        sp.add_argument("--calibrate-seconds", type=_positive_seconds, default=10.0,
                        help="training seconds of the short run that measures this device's tokens/s (default 10)")
        sp.add_argument("--out", default=None, help="folder for device-check.csv/json (default "
                                                    "results_dir/device-check)")


def _tool_options(sp, name: str) -> None:
    """The options of the report, records, params and bench commands."""
    if name == "report":
        sp.add_argument("--name", default=None,
                        help="render benchmarks/NAME's report from its committed tables (no data, no training) "
                             "into results_dir/reports/NAME.html")
    if name == "restate":
        sp.add_argument("--as-published", action="store_true",
                        help="under the params recorded in its provenance.json (the statistics' code changed, "
                             "not its settings), instead of --config")
        sp.set_defaults(config=None)  # params.yaml unless --as-published: told apart from a --config given beside it
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
        sp.add_argument("--bias-positions", type=_positive_int, default=256,
                        help="validation positions the bias curve averages over (default 256)")
        sp.add_argument("--sizes", type=_positive_int, nargs="+", default=[1, 4, 16, 64],
                        help="sample sizes of the bias curve (default 1 4 16 64)")
        sp.add_argument("--reps", type=_positive_int, default=40,
                        help="independent draws per sample size (default 40)")


def _out_of_memory(e: BaseException) -> bool:
    """torch's allocation failures: MemoryError, torch.OutOfMemoryError (a RuntimeError), or the CPU allocator's
    RuntimeError ("can't allocate memory")."""
    text = str(e).lower()
    return isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError" or "can't allocate memory" in text \
        or "out of memory" in text


def _os_error(command: str, e: OSError) -> int:
    """The system's error on a file read or written, in one line naming the step and the file."""
    where = f" {e.filename}" if e.filename else ""  # read or written: the error says which went wrong
    hint = "; free some space and rerun" if e.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    print(f"error: {command}:{where}: {e.strerror or e}{hint}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from .data.corpora import CorpusError
    from .data.prepare import CorpusContentError
    from .io.errors import Diverged, ResumeError, Stopped, runnable_hints

    try:
        if args.command in NO_PARAMS:
            COMMANDS[args.command][0](None, args)
            return 0
        if args.command == "restate" and args.as_published:  # the params it was published with: no --config read
            if args.config is not None:
                raise ConfigError(f"restate --as-published restates under the params benchmarks/{args.name} was "
                                  f"published with, so --config {args.config} would be ignored: give one of them")
            COMMANDS[args.command][0](None, args)
            return 0
        if args.config is None:  # restate's default (None: told apart from a --config given beside --as-published)
            args.config = "params.yaml"
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
        if isinstance(e, FileNotFoundError) and e.filename:  # the system's, not a step's own message: as below
            return _os_error(args.command, e)
        print(f"error: {runnable_hints(str(e), getattr(args, 'config', None), NO_PARAMS)}", file=sys.stderr)
        return 2
    except OSError as e:  # disk full, quota, read-only or permission-denied output (nothing half-written stays)
        return _os_error(args.command, e)
    except Diverged as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    except Stopped as e:
        print(f"{e}", file=sys.stderr)
        return 128 + e.signum  # the shell's convention for "killed by signal N"
    except KeyboardInterrupt:  # Ctrl-C outside training (which checkpoints and raises Stopped): no traceback
        print(f"error: {args.command} interrupted (Ctrl-C); each of its outputs is written whole or not at all: "
              f"rerun it to finish", file=sys.stderr)
        return 130
    except (MemoryError, RuntimeError) as e:  # after Diverged and Stopped, RuntimeErrors of their own
        if not _out_of_memory(e):
            raise
        first = (str(e).strip().splitlines() or ["MemoryError"])[0][:160]
        print(f"error: {args.command}: out of memory ({first}): the model, batch or matrix is too large for this "
              f"machine; reduce model.emb_dim / hidden_dim, training.batch_size, evaluation.batch_size or "
              f"matrix.dims", file=sys.stderr)
        return 2
    return 0
