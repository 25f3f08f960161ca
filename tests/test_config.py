import copy
import json
import subprocess
import sys

import pytest
from conftest import ROOT

from pipeline_src import config
from pipeline_src.config import ConfigError


def test_default_params_are_valid(default_params):
    p = config.validate(copy.deepcopy(default_params))
    assert p["run"]["datasets"] == ["synth"]
    assert config.model_config(p, "synth").hidden_dim == 16  # dataset override of the global 200
    assert config.model_config(p, "ptb").hidden_dim == 200


def _error(params) -> str:
    with pytest.raises(ConfigError) as e:
        config.validate(params)
    return str(e.value)


def test_unknown_key_is_named_with_allowed_keys(default_params):
    p = copy.deepcopy(default_params)
    p["training"]["learning_rate"] = 1.0
    msg = _error(p)
    assert "training" in msg and "'learning_rate' was unexpected" in msg
    assert "allowed keys here" in msg and "'lr'" in msg


def test_bad_enum_lists_allowed_values(default_params):
    p = copy.deepcopy(default_params)
    p["training"]["optimizer"] = "adamw"
    msg = _error(p)
    assert "key 'training.optimizer'" in msg and "'adamw'" in msg and "['sgd', 'adam']" in msg


def test_bad_nested_corpus_value(default_params):
    p = copy.deepcopy(default_params)
    p["datasets"]["synth"]["corpus"]["order"] = 9
    msg = _error(p)
    assert "datasets.synth.corpus.order" in msg and "9" in msg


def test_method_options_come_from_the_head(default_params):
    p = copy.deepcopy(default_params)
    p["methods"]["softmax"]["chunk"] = 3
    msg = _error(p)
    assert "methods.softmax" in msg and "'chunk' was unexpected" in msg and "chunk_size" in msg
    p["methods"]["softmax"] = {"type": "nope"}
    msg = _error(p)
    assert "methods.softmax.type" in msg and "'softmax'" in msg


def test_run_must_reference_defined_entries(default_params):
    p = copy.deepcopy(default_params)
    p["run"]["methods"] = ["softmax", "nope"]
    msg = _error(p)
    assert "run.methods" in msg and "'nope'" in msg and "'softmax'" in msg and "'mos'" in msg
    p = copy.deepcopy(default_params)
    p["matrix"]["methods"] = ["nope"]
    assert "matrix.methods" in _error(p)


def test_the_reference_is_a_defined_method(default_params):
    """The probe: `reference: sofmax` was valid, and every size then compared against a stand-in (the best
    method that learned) without a word of why."""
    p = copy.deepcopy(default_params)
    p.setdefault("statistics", {})["reference"] = "sofmax"
    msg = _error(p)
    assert "key 'statistics.reference': 'sofmax' is not defined under 'methods'" in msg and "'softmax'" in msg
    p["statistics"]["reference"] = "mos"
    assert config.validate(p)["statistics"]["reference"] == "mos"


def test_contrasts_name_defined_methods_in_pairs(default_params):
    p = copy.deepcopy(default_params)
    p.setdefault("statistics", {})["contrasts"] = [["mos", "moc"], ["mos", "nope"]]
    msg = _error(p)
    assert "key 'statistics.contrasts.1'" in msg and "'nope'" in msg and "'softmax'" in msg
    p["statistics"]["contrasts"] = [["mos", "mos"]]
    assert "key 'statistics.contrasts.0'" in _error(p) and "against itself" in _error(p)
    p["statistics"]["contrasts"] = [["mos", "moc", "softmax"]]
    assert "statistics.contrasts.0" in _error(p)
    p["statistics"]["contrasts"] = [["mos", "moc"]]
    assert config.validate(p)["statistics"]["contrasts"] == [["mos", "moc"]]
    assert config.validate(copy.deepcopy(default_params))["statistics"]["contrasts"] == [
        ["mos", "moc"], ["mos", "wide-softmax"]]


def test_too_large_synthetic_table_is_refused(default_params):
    p = copy.deepcopy(default_params)
    p["datasets"]["synth"]["corpus"].update(vocab_size=5000, order=3)
    assert "at most 50,000,000" in _error(p)


def test_config_hash_ignores_key_order():
    assert config.config_hash({"a": 1, "b": [1, 2]}) == config.config_hash({"b": [1, 2], "a": 1})
    assert config.config_hash({"a": 1}) != config.config_hash({"a": 2})


def test_run_config_carries_everything_that_shapes_a_run(default_params):
    cfg = config.run_config(default_params, "synth", "softmax")
    assert set(cfg) == {"data", "method_name", "method", "model", "training", "evaluation", "seed"}
    assert cfg["training"]["optimizer"] == "adam" and cfg["training"]["bptt"] == 35


def test_load_reports_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        config.load(tmp_path / "nope.yaml")
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")  # a link that leads back to itself: not "missing"
    with pytest.raises(ConfigError, match=r"loop.yaml is a symbolic link in a loop of links"):
        config.load(tmp_path / "loop.yaml")
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "gone.yaml")
    with pytest.raises(ConfigError, match=r"dangling.yaml is a symbolic link to .*gone.yaml, which does not exist"):
        config.load(tmp_path / "dangling.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        config.load(bad)
    # one line with the file, line and column (PyYAML's own message spans four and names "<unicode string>")
    for text, says in (("seed: 1\nrun:\n  seeds: [1]\n   datasets: [synth]\n",
                        r"bad.yaml:4:4: not valid YAML: expected <block end>, .* that began at line 3\)$"),
                       ("seed: 1\nseed: 2\n", r"bad.yaml:2:1: not valid YAML: key 'seed' appears twice .*line 1\)$")):
        bad.write_text(text)
        with pytest.raises(ConfigError, match=says) as e:
            config.load(bad)
        assert "\n" not in str(e.value) and "unicode string" not in str(e.value)


def test_extends_lays_a_small_file_over_its_base(tmp_path):
    """`extends:` (relative to the file) takes the base, itself possibly extending another, and lays the
    file's keys over it: mappings merge at every depth, other values (lists too) replace."""
    from conftest import ROOT

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "mid.yaml").write_text(f"extends: {ROOT / 'params.yaml'}\n"
                                               "training: {epochs: 2}\nrun: {methods: [softmax, mos]}\n")
    (tmp_path / "small.yaml").write_text("extends: sub/mid.yaml\ntraining: {lr: 0.5}\nrun: {seeds: [4]}\n")
    base = config.load(ROOT / "params.yaml")
    got = config.load(tmp_path / "small.yaml")
    assert got["training"] == {**base["training"], "epochs": 2, "lr": 0.5}  # merged at depth, two levels
    assert got["run"] == {**base["run"], "methods": ["softmax", "mos"], "seeds": [4]}  # lists replaced
    assert "extends" not in got and got["methods"] == base["methods"]
    # the resolved file is the same config for DVC, which reads params.yaml as it is
    from pipeline_src.cli import main

    assert main(["resolve", "--config", str(tmp_path / "small.yaml"), "--out", str(tmp_path / "params.yaml")]) == 0
    assert config.load(tmp_path / "params.yaml") == got
    assert config.config_hash(config.run_config(got, "synth", "mos", 4)) == config.config_hash(
        config.run_config(config.load(tmp_path / "params.yaml"), "synth", "mos", 4))


def test_extends_errors_name_the_file_and_the_chain(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ConfigError, match=r"a.yaml: key 'extends' makes a cycle: .*a.yaml -> .*b.yaml -> .*a.yaml"):
        config.load(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("extends: missing.yaml\n")
    with pytest.raises(ConfigError, match=r"missing.yaml \(extended by .*c.yaml\) does not exist"):
        config.load(tmp_path / "c.yaml")
    (tmp_path / "d.yaml").write_text("extends: [a.yaml]\n")
    with pytest.raises(ConfigError, match=r"d.yaml: key 'extends': expected the path"):
        config.load(tmp_path / "d.yaml")
    (tmp_path / "d.yaml").write_text("!replace\nextends: a.yaml\nseed: 3\n")  # the probe: a silent no-op
    with pytest.raises(ConfigError, match=r"d.yaml: !replace tags the whole file"):
        config.load(tmp_path / "d.yaml")
    (tmp_path / "d.yaml").write_text("extends: ''\n")  # the probe: "/tmp (extended by d.yaml) is a directory"
    with pytest.raises(ConfigError, match=r"d.yaml: key 'extends': expected the path of a params file, got ''"):
        config.load(tmp_path / "d.yaml")
    (tmp_path / "e.yaml").write_text(f"extends: {tmp_path / 'f.yaml'}\ntraining: {{epochs: 0}}\n")
    (tmp_path / "f.yaml").write_text((__import__("conftest").ROOT / "params.yaml").read_text())
    with pytest.raises(ConfigError, match=r"training.epochs"):  # the merged result is validated
        config.load(tmp_path / "e.yaml")


def test_an_error_in_a_base_file_is_blamed_on_the_base(tmp_path):
    """The probe: an unknown key or an undefined method written in a base was reported against the file that
    extends it (the unknown key's parent mapping, the top level, is the child's too)."""
    from conftest import ROOT

    (tmp_path / "child.yaml").write_text("extends: base.yaml\nseed: 5\n")
    for text, says in (("foo_unknown: 3\n", r"base.yaml: key '<top level>': .*'foo_unknown' was unexpected"),
                       ("run: {methods: [softmax, nosuch]}\n", r"base.yaml: key 'run.methods': 'nosuch' is not defined")):
        (tmp_path / "base.yaml").write_text(f"extends: {ROOT / 'params.yaml'}\n{text}")
        with pytest.raises(ConfigError, match=says):
            config.load(tmp_path / "child.yaml")


def _tuned(default_params):
    p = copy.deepcopy(default_params)
    p["tuning"] = {"enabled": True, "trials": 4, "seed": 0, "epochs": 1, "lr": {"adam": [0.003, 0.1]},
                   "space": {"adaptive-softmax": {"cutoffs": {"choices": [[25, 125], [100]]}}}}
    return p


def test_every_tuning_choice_and_range_end_is_checked_against_the_option(default_params):
    config.validate(_tuned(default_params))
    p = _tuned(default_params)
    p["tuning"]["space"]["adaptive-softmax"]["cutoffs"]["choices"].append("many")  # crashed the trial drawing it
    with pytest.raises(ConfigError, match=r"key 'tuning.space.adaptive-softmax.cutoffs.choices.2': 'many' is not a "
                                          r"value of option 'cutoffs'"):
        config.validate(p)
    p = _tuned(default_params)
    p["tuning"]["space"]["nce"] = {"alpha": {"low": -1.0, "high": 1.0}}
    with pytest.raises(ConfigError, match=r"key 'tuning.space.nce.alpha.low': -1.0 is not a value"):
        config.validate(p)


def test_the_learning_rate_range_is_checked_by_check_config(default_params):
    p = _tuned(default_params)
    p["tuning"]["lr"] = {"adam": [0.1, 0.01]}
    with pytest.raises(ConfigError, match=r"key 'tuning.lr.adam': need 0 < low < high, got \[0.1, 0.01\]"):
        config.validate(p)
    p["tuning"]["lr"] = {"sgd": [1.0, 10.0]}  # the default run trains with adam
    with pytest.raises(ConfigError, match=r"key 'tuning.lr.adam': no learning-rate range for the optimizer 'adam'"):
        config.validate(p)


def test_a_seed_written_as_a_float_is_refused_not_renamed(default_params):
    p = copy.deepcopy(default_params)
    p["run"]["seeds"] = [1, 2.0]  # JSON schema calls 2.0 an integer; DVC would name its directory seed2.0
    with pytest.raises(ConfigError, match=r"key 'run.seeds.1': 2.0 is not an integer; write it as 2"):
        config.validate(p)


def test_a_reference_that_is_not_run_is_no_error(default_params):
    """The verdicts then take the best method that learned as the reference, named (tests/test_stats.py)."""
    p = copy.deepcopy(default_params)
    p["run"]["methods"] = ["mos", "moc"]
    config.validate(p)
    p["run"]["methods"] = ["mos"]
    config.validate(p)


def test_a_schema_error_in_a_base_file_names_the_base(tmp_path):
    from conftest import ROOT

    base = tmp_path / "base.yaml"
    base.write_text((ROOT / "params.yaml").read_text().replace("  layers: 2", "  layers: 0", 1))
    (tmp_path / "child.yaml").write_text("extends: base.yaml\nseed: 3\n")
    with pytest.raises(ConfigError) as e:
        config.load(tmp_path / "child.yaml")
    assert f"{base}: key 'model.layers'" in str(e.value)  # the base wrote it, not the child


def test_replace_swaps_a_mapping_of_the_base_instead_of_merging(tmp_path):
    from conftest import ROOT

    (tmp_path / "small.yaml").write_text(
        f"extends: {ROOT / 'params.yaml'}\n"
        "methods: !replace {softmax: {type: softmax}, mos: {type: mos, components: 2}}\n"
        "run: {methods: [softmax, mos]}\nbench: {methods: [softmax]}\nmatrix: {methods: [softmax]}\n"
        "statistics: {contrasts: []}\n")
    # the default run's second crossing is inherited with the rest of run: its methods are gone now
    with pytest.raises(ConfigError, match=r"key 'run.extra.methods': 'sampled-softmax' is not defined under "
                                          r"'methods'.*unless it says `run: \{extra: \{datasets: \[\], methods"):
        config.load(tmp_path / "small.yaml")
    (tmp_path / "small.yaml").write_text((tmp_path / "small.yaml").read_text().replace(
        "run: {methods: [softmax, mos]}", "run: {methods: [softmax, mos], extra: {datasets: [], methods: []}}"))
    got = config.load(tmp_path / "small.yaml")
    assert got["methods"] == {"softmax": {"type": "softmax"}, "mos": {"type": "mos", "components": 2}}
    assert type(got["methods"]) is dict  # plain: it dumps as YAML (resolve) and validates
    (tmp_path / "merged.yaml").write_text(f"extends: {ROOT / 'params.yaml'}\nmethods: {{mos: {{components: 2}}}}\n")
    assert len(config.load(tmp_path / "merged.yaml")["methods"]) > 2  # without it, mappings merge


def test_a_training_key_its_schedule_does_not_use_is_refused(default_params):
    p = copy.deepcopy(default_params)
    p["training"]["decay_start"] = 5  # the default run's schedule is plateau
    with pytest.raises(ConfigError, match=r"key 'training.decay_start' \(dataset synth\): set to 5, but it only acts "
                                          r"with schedule fixed-then-geometric"):
        config.validate(p)
    p = copy.deepcopy(default_params)
    p["training"]["bptt_max_delta"] = 10
    with pytest.raises(ConfigError, match=r"'training.bptt_max_delta'.*only acts with variable_bptt: true"):
        config.validate(p)
    p["training"]["variable_bptt"] = True
    config.validate(p)


def test_a_transformer_option_on_an_lstm_names_the_key_that_is_set(default_params):
    p = copy.deepcopy(default_params)
    p["model"]["heads"] = 2
    with pytest.raises(ConfigError, match=r"key 'model.heads' \(dataset synth\): a transformer option"):
        config.validate(p)


def test_the_second_crossing_runs_its_own_methods_on_its_own_datasets(default_params):
    p = config.validate(copy.deepcopy(default_params))
    extra = p["run"]["extra"]
    assert extra["datasets"] == ["zipf-5k"] and "mos" not in extra["methods"]
    assert config.run_datasets(p) == ["synth", "zipf-5k"]
    assert config.dataset_methods(p, "synth") == p["run"]["methods"]
    assert config.dataset_methods(p, "zipf-5k") == extra["methods"]
    assert len(config.run_pairs(p)) == len(p["run"]["methods"]) + len(extra["methods"])
    # a dataset's own evaluation keys lie over the global ones (the argmax LPs are off in the large-vocabulary half)
    assert config.run_config(p, "zipf-5k", "softmax")["evaluation"]["argmax"] is False
    assert "argmax" not in config.run_config(p, "synth", "softmax")["evaluation"]


@pytest.mark.parametrize("extra, message", [
    ({"datasets": ["synth"], "methods": ["softmax"]}, r"'run.extra.datasets': \['synth'\] also in run.datasets"),
    ({"datasets": ["nowhere"], "methods": ["softmax"]}, r"'run.extra.datasets': 'nowhere' is not defined"),
    ({"datasets": ["ptb"], "methods": ["nothing"]}, r"'run.extra.methods': 'nothing' is not defined"),
    ({"datasets": ["ptb"], "methods": []}, r"'run.extra': give both datasets and methods"),
])
def test_a_bad_second_crossing_is_refused_naming_the_key(default_params, extra, message):
    p = copy.deepcopy(default_params)
    p["run"]["extra"] = extra
    with pytest.raises(ConfigError, match=message):
        config.validate(p)


def test_a_second_crossing_may_leave_the_reference_out(default_params):
    """A size the reference's budget cannot reach (the softmax at 1M words) runs the others; its verdicts take
    the best method that learned as the reference (tests/test_stats.py)."""
    p = copy.deepcopy(default_params)
    p["run"]["extra"] = {"datasets": ["ptb"], "methods": ["nce", "mos"]}
    config.validate(p)
    assert ("ptb", "softmax") not in config.run_pairs(p) and ("ptb", "nce") in config.run_pairs(p)


def test_head_options_as_data_are_the_registry_s_and_a_damaged_cache_is_rebuilt():
    """Configs are validated from a cache of every head's options schema, family and training cost (no torch
    import): it must be exactly what the registry gives, and a cache file that is not JSON is rebuilt rather
    than trusted."""
    from pipeline_src.heads import options as head_options
    from pipeline_src.heads import options_schema, registry

    want = {name: options_schema(cls) for name, cls in registry().items()}
    head_options._facts.cache_clear()
    assert head_options.head_options() == want
    assert head_options.head_families() == {name: cls.family for name, cls in registry().items()}
    assert head_options.train_cost("moss") == registry()["moss"].train_cost == 9
    cache = head_options.HEADS / "__pycache__" / f"heads-{head_options._source_key()}.json"
    assert json.loads(cache.read_text())["options"] == want
    cache.write_text('{"options": {"softmax": ')
    head_options._facts.cache_clear()  # as a new process would read it
    assert head_options.head_options() == want and json.loads(cache.read_text())["options"] == want
    assert head_options.option_defaults("nce")["negatives"] == registry()["nce"].Options().negatives


def test_light_steps_and_config_validation_do_not_import_torch(tmp_path):
    """check-config, summarize's and figures' modules and the Snakefile's helpers run without torch (a second
    of every light job and every Snakemake start); training and evaluation import it when they run."""
    code = ("import sys; from pipeline_src import cli; from pipeline_src.reporting import summarize, figures, publish;"
            "from pipeline_src.records import stash, hashes; from pipeline_src.config import runspec;"
            "from pipeline_src.config import load; load('params.yaml'); load('config/large-vocab.yaml');"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
