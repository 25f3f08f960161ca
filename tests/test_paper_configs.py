"""The paper configs (config/paper/): each resolves and dry-runs through Snakemake as shipped, and runs
end to end on a CPU through a small file that extends it and shrinks only sizes and budgets."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, clean_env

from pipeline_src.config import load

BIN = Path(sys.executable).parent
PAPER = sorted(p for p in (ROOT / "config" / "paper").glob("*.yaml") if not p.name.startswith("_"))

# what a CPU can afford in seconds (sizes, budgets, a 2,000-word vocabulary, the config's first method
# only: the others' options are validated by the dry run; no argmax diagnostic, a pass over the test split
# that tests/test_argmax.py covers); everything else (encoder, regularisers, schedule, head, corpus) as shipped
SHRINK = """extends: {base}
data_dir: data
results_dir: results/{name}
run: {{methods: [{method}]}}
model: {{emb_dim: 16, hidden_dim: 24{last}}}
training: {{epochs: 2, max_steps_per_epoch: 4, batch_size: 4, bptt: 12, nonmono: 0, eval_batch_size: 200,
           checkpoint_every_steps: null{finetune}}}
evaluation: {{batch_size: 200, rank_contexts: 40, argmax: false}}
datasets: {{{dataset}: {{tokenizer: {{max_vocab: 2000}}}}}}
bench: {{vocab_sizes: [100], tokens: 16, dim: 8, repeats: 1, warmup: 0}}
{methods}
"""


def _whole_valid(p: dict) -> bool:
    """Whether the shrunk run validates on all of valid in training: the finetuned PTB configs."""
    return bool(p["training"].get("finetune_epochs")) and p["run"]["datasets"][0] == "ptb"


def _project(tmp_path: Path) -> Path:
    import yaml
    from conftest import tiny_params
    from test_pipeline import _project as project

    return project(tmp_path, tiny_params(yaml.safe_load((ROOT / "params.yaml").read_text()), tmp_path))


def _shared_data(small: Path, dataset: str, tmp_path: Path) -> Path:
    """Where this pytest worker keeps a dataset fetched and prepared under one data config (its hash in the
    name): the configs that share it skip fetch and prepare (the pipeline checks the hash before training)."""
    from pipeline_src.config import config_hash, data_config

    return tmp_path.parent / "paper-data" / f"{dataset}-{config_hash(data_config(load(small), dataset))}"


def _sh(cmd, cwd, mirror):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                       env=clean_env(cwd, LMBENCH_MIRROR=str(mirror)))
    assert r.returncode == 0, f"{' '.join(map(str, cmd))}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def test_every_paper_config_names_its_figures_and_source():
    assert {p.name for p in PAPER} >= {"awd-lstm-ptb.yaml", "awd-lstm-wt2.yaml", "awd-mos-ptb.yaml",
                                       "awd-mos-wt2.yaml"}
    for path in PAPER:
        p = load(path)
        assert p["paper"]["source"] and set(p["paper"]["ppl"]) <= set(p["run"]["methods"]), path.name
        assert all(p["datasets"][d]["corpus"]["type"] in ("ptb", "wikitext-2") for d in p["run"]["datasets"])


@pytest.mark.parametrize("path", PAPER, ids=lambda p: p.stem)
def test_paper_config_dry_runs_as_shipped(tmp_path, path, mirror):
    proj = _project(tmp_path)
    dry = _sh([str(BIN / "snakemake"), "-n", "--cores", "1", "--config", f"params={path}"], proj, mirror).stdout
    p = load(path)
    n_runs = len(p["run"]["datasets"]) * len(p["run"]["methods"]) * len(p["run"]["seeds"])
    assert dry.count("rule train:") == n_runs and "rule report:" in dry
    finetunes = bool(p["training"].get("finetune_epochs"))  # then a finetuning job per run, before evaluation
    assert dry.count("rule finetune:") == (n_runs if finetunes else 0)


@pytest.mark.slow
@pytest.mark.parametrize("path", PAPER, ids=lambda p: p.stem)
def test_paper_config_runs_end_to_end_shrunk(tmp_path, path, mirror):
    p = load(path)
    method = p["run"]["methods"][0]
    mos = p["methods"][method]["type"] == "mos"
    small = tmp_path / "small.yaml"
    small.write_text(SHRINK.format(base=path, name=path.stem, method=method, last=", last_dim: 20" if mos else "",
                                   dataset=p["run"]["datasets"][0],
                                   # training validates on the first 20,000 tokens, but a finetuned PTB run on all
                                   # of them: its test checks that evaluation scores the kept model (WikiText-2's
                                   # 217k tokens, 4 validations of a MoS, were half of this test's time)
                                   finetune=(", finetune_epochs: 2" if p["training"].get("finetune_epochs") else "")
                                   + ("" if _whole_valid(p) else ", valid_tokens: 20000"),
                                   methods=f"methods: {{{method}: {{components: 3}}}}" if mos else ""))
    proj = _project(tmp_path)
    # the first config to its report; the others to their run's metrics (the summary, references, matrix fits,
    # bench, figures and report do not depend on the paper config and are half of a run's time)
    report = path == PAPER[0]
    dataset, seed = p["run"]["datasets"][0], p["run"]["seeds"][0]
    targets = [] if report else [f"results/{path.stem}/runs/{dataset}/{method}/seed{seed}/metrics.json"]
    data = _shared_data(small, dataset, tmp_path)
    if data.exists():  # prepared by an earlier config of this worker under the same data config
        shutil.copytree(data, proj / "data")
    _sh([str(BIN / "snakemake"), *targets, "--cores", "2", "--config", f"params={small}"], proj, mirror)
    if not data.exists():
        shutil.copytree(proj / "data", data)
    res = proj / "results" / path.stem
    metrics = json.loads((res / "runs" / dataset / method / f"seed{seed}" / "metrics.json").read_text())
    cfg = metrics["config"]
    assert cfg["model"]["encoder"] == "awd-lstm" and cfg["model"]["weight_drop"] == 0.5  # as shipped
    assert cfg["training"]["schedule"] == "nt-asgd" and cfg["training"]["variable_bptt"] is True
    assert cfg["model"]["hidden_dim"] == 24 and cfg["training"]["epochs"] == 2  # shrunk
    assert metrics["rank"]["vocab"] == 2000  # the shrunk vocabulary
    assert metrics["splits"]["test"]["ppl"] < 2000  # below the uniform model's 2,000 after 8 steps
    if p["training"].get("finetune_epochs"):  # scored after finetuning, the trained model beside it
        ft = metrics["finetune"]
        assert ft["epochs"] == 2 and ft["config"]["training"]["lr"] == p["training"].get("finetune_lr",
                                                                                          p["training"]["lr"])
        assert metrics["before_finetune"]["test"]["ppl"] > 0
        if _whole_valid(p):  # the kept model is the one evaluation scores: its validation nll again, on all of valid
            assert metrics["splits"]["valid"]["nll"] == pytest.approx(ft["best_valid_nll"], rel=1e-6)
    if not report:
        return
    head = pd.read_csv(res / "headline.csv")
    assert head.paper_ppl.iloc[0] == p["paper"]["ppl"][method]
    html = (res / "report.html").read_text()  # the report's headline puts the paper's figure beside the run's
    assert "<th>vs paper</th>" in html and f"<td>{p['paper']['ppl'][method]:.2f}</td>" in html
