import json
import math

import numpy as np
import pytest
import torch

from pipeline_src.config import run_config
from pipeline_src.data.batching import batchify, scored_positions, segments
from pipeline_src.data.corpora import SPLITS
from pipeline_src.data.prepare import load_split
from pipeline_src.evaluation.evaluate import evaluate, stream_log_probs
from pipeline_src.io import paths
from pipeline_src.io.errors import ResumeError
from pipeline_src.training.loop import train
from pipeline_src.training.step import build_model

CPU = torch.device("cpu")


@pytest.fixture
def data(tiny_data):
    return tiny_data


def test_batchify_and_segments():
    ids = np.arange(23)
    d = batchify(ids, 4)
    assert d.shape == (5, 4) and d[:, 1].tolist() == [5, 6, 7, 8, 9]
    segs = list(segments(d, 3))
    assert [s[1].shape[0] for s in segs] == [3, 1]
    assert torch.equal(segs[0][2], d[1:4]) and torch.equal(segs[1][2], d[4:5])
    pos = scored_positions(23, 4)
    assert np.array_equal(ids[pos], d[1:].numpy())


def test_training_learns_and_writes_its_outputs(data):
    p, raw, prep = data
    cfg = run_config(p, "tiny", "softmax")
    out = paths.run_dir(p, "tiny", "softmax", 0)
    summary = train(cfg, prep, out, CPU)
    assert sorted(f.name for f in out.iterdir()) == ["history.csv", "model.pt", "train.json"]
    hist = np.genfromtxt(out / "history.csv", delimiter=",", names=True, dtype=None, encoding=None)
    assert len(hist) == 3 and hist["valid_nll"][-1] < hist["valid_nll"][0] < math.log(31)
    ckpt = torch.load(out / "model.pt", weights_only=False)
    assert ckpt["config"] == cfg and ckpt["config_hash"] == summary["config_hash"]
    assert summary["params"] == sum(t.numel() for k, t in ckpt["model"].items() if k != "head.weight")
    assert summary["seed"] == p["run"]["seeds"][0] == 0 and summary["tokens_per_s_train"] > 0
    assert summary["status"] == "ok" and summary["head_flops_per_token_train"] == 6 * 16 * 31


@pytest.mark.parametrize("schedule", ["plateau", "nt-asgd", "variable-bptt"])
def test_resume_after_interruption_is_bitwise_identical(data, tmp_path, schedule):
    """Also while nt-asgd averages (nonmono 0 and a rate that overshoots: it triggers early), the mean is
    checkpointed with the rest."""
    p, raw, prep = data
    cfg = run_config(p, "tiny", "softmax")
    cfg["training"]["checkpoint_every_steps"] = 4
    cut2 = 9
    if schedule == "nt-asgd":  # triggers by epoch 4 (75 steps each): the second cut lands in epoch 5
        cfg["training"].update(schedule="nt-asgd", nonmono=0, lr=0.3, epochs=5)
        cut2 = 4 * 75 + 10 - 7
    if schedule == "variable-bptt":
        cfg["training"].update(variable_bptt=True, epochs=2)
    ref_dir, cut_dir = tmp_path / "ref", tmp_path / "cut"
    train(cfg, prep, ref_dir, CPU)
    # interrupt mid-epoch twice (after step 7, then cut2 steps later), then finish
    assert train(cfg, prep, cut_dir, CPU, stop_after_steps=7) is None
    assert (cut_dir / "checkpoint.pt").exists() and not (cut_dir / "train.json").exists()
    assert train(cfg, prep, cut_dir, CPU, stop_after_steps=cut2) is None
    train(cfg, prep, cut_dir, CPU)
    a = torch.load(ref_dir / "model.pt", weights_only=False)["model"]
    b = torch.load(cut_dir / "model.pt", weights_only=False)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    cols = lambda f: [r.split(",")[:5] for r in f.read_text().splitlines()]  # noqa: E731  (timings differ)
    assert cols(ref_dir / "history.csv") == cols(cut_dir / "history.csv")
    assert not (cut_dir / "checkpoint.pt").exists()
    if schedule == "nt-asgd":
        got = json.loads((cut_dir / "train.json").read_text())
        assert got["averaging_from_epoch"] <= 5, got  # averaging was on across the second interruption


def test_resume_refuses_a_checkpoint_of_another_config(data, tmp_path):
    p, raw, prep = data
    cfg = run_config(p, "tiny", "softmax")
    train(cfg, prep, tmp_path / "run", CPU, stop_after_steps=2)
    cfg["training"]["lr"] = 0.5
    with pytest.raises(ResumeError, match="different config"):
        train(cfg, prep, tmp_path / "run", CPU)


def test_streamed_evaluation_equals_one_pass_and_is_normalised(data):
    p, raw, prep = data
    cfg = run_config(p, "tiny", "softmax")
    torch.manual_seed(0)
    model = build_model(cfg, prep).eval()
    ids = load_split(prep, "valid")
    d = batchify(ids, 3)
    lp, _ = stream_log_probs(model, d, bptt=7)  # carried state across segments
    with torch.no_grad():
        h, _ = model.encoder(d[:-1], model.init_state(3))  # one pass, no truncation
        full = model.head.log_prob(h.reshape(-1, h.shape[-1]))
    assert torch.allclose(torch.logsumexp(full, 1), torch.zeros(full.shape[0]), atol=1e-5)
    brute = full.gather(1, d[1:].reshape(-1, 1)).view_as(lp)
    assert torch.allclose(lp, brute, atol=1e-5)


def test_synthetic_evaluation_reports_the_true_cross_entropy(data):
    p, raw, prep = data
    cfg = run_config(p, "tiny", "softmax")
    model = build_model(cfg, prep)
    res = evaluate(model, cfg, prep, raw, CPU)
    for split in ("valid", "test"):
        r = res[split]
        assert r["tokens"] == len(scored_positions(len(load_split(prep, split)), 4).reshape(-1))
        assert math.isclose(r["ppl"], math.exp(r["nll"]))
        assert r["gap_nll"] == pytest.approx(r["nll"] - r["true_nll"])
        assert r["gap_nll"] > 0  # an untrained model is worse than the truth
        # the true nll on (almost) all positions is what the generator reported
    import json
    truth = json.loads((raw / "truth.json").read_text())
    assert res["test"]["true_nll"] == pytest.approx(truth["test_nll"], abs=0.05)
    assert set(SPLITS) == {"train", "valid", "test"}


def test_rank_diagnostic_softmax_bounded_mos_not(data):
    from pipeline_src.evaluation.evaluate import rank_diagnostic

    p, raw, prep = data
    ids = load_split(prep, "valid")
    ranks = {}
    for method, spec in (("softmax", {"type": "softmax"}), ("mos", {"type": "mos", "components": 4})):
        cfg = run_config(dict(p, methods={method: spec}), "tiny", method)
        torch.manual_seed(0)
        r = rank_diagnostic(build_model(cfg, prep), ids, 200, 10, CPU)
        assert r["contexts"] == 200 and r["vocab"] == 31 and r["head_dim"] == 16 and r["softmax_bound"] == 18
        assert len(r["spectrum"]) == 31 and r["spectrum"][0] == 1.0 and r["spectrum"] == sorted(r["spectrum"])[::-1]
        ranks[method] = r["rank"], r["residual_beyond_bound"]
    assert ranks["softmax"][0] <= 18 < ranks["mos"][0]
    assert ranks["softmax"][1] < 1e-12 < ranks["mos"][1]  # a softmax is exactly within its bound (float64)


def test_residual_beyond_a_rank_is_the_best_approximations_error():
    """Eckart-Young, against a matrix built with known singular values and a truncated SVD."""
    from pipeline_src.data.linalg import residual_beyond, singular_values

    g = np.random.default_rng(0)
    u, _ = np.linalg.qr(g.normal(size=(40, 12)))
    v, _ = np.linalg.qr(g.normal(size=(30, 12)))
    s_true = np.array([9.0, 5, 4, 2, 1, 0.5, 0.25, 0.1, 0.05, 0.02, 0.01, 0.001])
    a = u @ np.diag(s_true) @ v.T
    s = singular_values(a)
    np.testing.assert_allclose(s[:12], s_true, rtol=1e-10)
    uu, ss, vt = np.linalg.svd(a, full_matrices=False)
    for k in (0, 3, 7, 12):
        a_k = uu[:, :k] @ np.diag(ss[:k]) @ vt[:k]
        assert abs(residual_beyond(s, k) - np.linalg.norm(a - a_k) / np.linalg.norm(a)) < 1e-10
    assert residual_beyond(s, 12) < 1e-12 and residual_beyond(s, 0) == pytest.approx(1.0)


def test_untied_projection_narrows_the_head_input_and_its_rank(data):
    """model.proj_dim (untied): the head sees a proj_dim-wide context, so a softmax's log-probability
    matrix has rank at most proj_dim + 2 while a mixture's is not bounded by it."""
    from pipeline_src.config import ConfigError, validate
    from pipeline_src.evaluation.evaluate import rank_diagnostic

    p, raw, prep = data
    ids = load_split(prep, "valid")
    assert "proj_dim" not in run_config(p, "tiny", "softmax")["model"]  # absent: published hashes stay valid
    p = dict(p, datasets={"tiny": {**p["datasets"]["tiny"], "model": {
        **p["datasets"]["tiny"]["model"], "tie_weights": False, "proj_dim": 3}}})
    ranks = {}
    for method, spec in (("softmax", {"type": "softmax"}), ("mos", {"type": "mos", "components": 4})):
        cfg = run_config(dict(p, methods={method: spec}), "tiny", method)
        assert cfg["model"]["proj_dim"] == 3
        torch.manual_seed(0)
        model = build_model(cfg, prep)
        assert model.encoder.proj.weight.shape == (3, 16) and model.encoder.out_dim == 3
        r = rank_diagnostic(model, ids, 200, 10, CPU)
        assert r["head_dim"] == 3 and r["softmax_bound"] == 5
        ranks[method] = r["rank"]
    assert ranks["softmax"] <= 5 < ranks["mos"]
    tied = dict(p, datasets={"tiny": {**p["datasets"]["tiny"], "model": {
        **p["datasets"]["tiny"]["model"], "tie_weights": True, "proj_dim": 3}}})
    with pytest.raises(ConfigError, match=r"model.proj_dim.*tie_weights"):
        validate(tied)


def test_self_normalisation_diagnostics_for_sampled_heads(data):
    import math as m

    p, raw, prep = data
    spec = {"type": "nce", "negatives": 5, "log_z": 0.7}
    cfg = run_config(dict(p, methods={"nce": spec}), "tiny", "nce")
    torch.manual_seed(0)
    model = build_model(cfg, prep)
    res = evaluate(model, cfg, prep, raw, CPU)["test"]
    # brute force over the same positions
    d = batchify(load_split(prep, "test"), 4)
    model.eval()  # evaluate() leaves the model in the mode it found it in
    with torch.no_grad():
        h, _ = model.encoder(d[:-1], model.init_state(4))
        s = h.reshape(-1, h.shape[-1]) @ model.head.weight.T + model.head.bias - 0.7
        z = torch.logsumexp(s, 1)
        st = s.gather(1, d[1:].reshape(-1, 1)).squeeze(1)
    assert res["log_z_mean"] == pytest.approx(z.mean().item(), abs=1e-4)
    assert res["log_z_std"] == pytest.approx(z.std().item(), abs=1e-4)
    assert res["unnormalised_ppl"] == pytest.approx(m.exp(-st.mean().item()), rel=1e-4)
    assert res["nll"] == pytest.approx((z - st).mean().item(), abs=1e-4)  # normalised = unnormalised + log Z


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_sampled_head_trains_with_a_sparse_step(data, tmp_path, optimizer):
    from pipeline_src.config import TrainConfig
    from pipeline_src.training.optim import build_optimizer

    p, raw, prep = data
    spec = {"type": "sampled-softmax", "negatives": 5, "sampler": "log-uniform"}
    cfg = run_config(dict(p, methods={"ss": spec}), "tiny", "ss")
    cfg["training"].update(optimizer=optimizer, lr=0.01 if optimizer == "adam" else 1.0)
    torch.manual_seed(0)
    model = build_model(cfg, prep)
    assert model.encoder.embedding.sparse and model.sparse_params() == [model.head.weight, model.head.bias_col]
    # one step touches only the rows of inputs, targets and negatives
    opt = build_optimizer(model, TrainConfig(**cfg["training"]))
    before = model.head.weight.detach().clone()
    x = torch.tensor([[1, 2], [3, 4]])
    y = torch.tensor([[2, 3], [4, 5]])
    loss, _ = model.loss(x, y, model.init_state(2))
    loss.backward()
    rows = set(model.head.weight.grad.coalesce().indices()[0].tolist())
    opt.step()
    changed = set(torch.nonzero((model.head.weight.detach() != before).any(1)).flatten().tolist())
    assert changed <= rows and {1, 2, 3, 4, 5} <= rows
    # whole runs: it learns, and an interrupted run resumes bitwise
    ref = train(cfg, prep, tmp_path / "ref", CPU)
    hist = (tmp_path / "ref" / "history.csv").read_text().splitlines()
    first, last = float(hist[1].split(",")[3]), float(hist[-1].split(",")[3])
    assert last < first
    assert train(cfg, prep, tmp_path / "cut", CPU, stop_after_steps=5) is None
    train(cfg, prep, tmp_path / "cut", CPU)
    a = torch.load(tmp_path / "ref" / "model.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "cut" / "model.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert ref["best_valid_nll"] < math.log(31)


@pytest.mark.parametrize("sampler", ["target-vocabulary", "in-batch", "quadratic-kernel"])
def test_each_proposal_trains_through_the_loop_and_resumes_bitwise(data, tmp_path, sampler, monkeypatch):
    from pipeline_src.heads.sampled_softmax import SampledSoftmax

    p, raw, prep = data
    spec = {"type": "sampled-softmax", "sampler": sampler, "negatives": 4, "tau": 12, "bucket_size": 4}
    cfg = run_config(dict(p, methods={"ss": spec}), "tiny", "ss")
    cfg["training"].update(optimizer="adam", lr=0.01)
    planned, real = [], SampledSoftmax.plan_epoch

    def spy(self, targets, start):  # the loop hands the head each epoch's targets, from its first step
        planned.append((len(targets), start, int(sum(int(y.sum()) for y in targets))))
        real(self, targets, start)

    monkeypatch.setattr(SampledSoftmax, "plan_epoch", spy)
    ref = train(cfg, prep, tmp_path / "ref", CPU)
    assert train(cfg, prep, tmp_path / "cut", CPU, stop_after_steps=5) is None
    train(cfg, prep, tmp_path / "cut", CPU)
    hist = (tmp_path / "ref" / "history.csv").read_text().splitlines()
    assert float(hist[-1].split(",")[3]) < float(hist[1].split(",")[3])
    a = torch.load(tmp_path / "ref" / "model.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "cut" / "model.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert ref["best_valid_nll"] < math.log(31)
    if sampler != "target-vocabulary":
        assert not planned  # only the target vocabulary plans its epochs
    else:
        epochs = cfg["training"]["epochs"]
        assert len(planned) == 2 * epochs + 1  # every epoch of both runs, and the resumed one again at step 5
        assert (planned[epochs][1], planned[epochs + 1][1]) == (0, 5)
        assert planned[epochs][0] == planned[epochs + 1][0] and planned[epochs][2] == planned[epochs + 1][2]


def test_weight_decay_with_sparse_gradients_is_a_config_error(data):
    from pipeline_src.config import ConfigError, TrainConfig
    from pipeline_src.training.optim import build_optimizer

    p, raw, prep = data
    cfg = run_config(dict(p, methods={"nce": {"type": "nce", "negatives": 5}}), "tiny", "nce")
    cfg["training"]["weight_decay"] = 1e-4
    with pytest.raises(ConfigError, match="key 'training.weight_decay'"):
        build_optimizer(build_model(cfg, prep), TrainConfig(**cfg["training"]))


def test_rank_diagnostic_leaves_out_zero_probability_words(data):
    from pipeline_src.evaluation.evaluate import rank_diagnostic

    p, raw, prep = data
    spec = {"type": "neglm", "negatives": 5}
    cfg = run_config(dict(p, methods={"neglm": spec}), "tiny", "neglm")
    torch.manual_seed(0)
    model = build_model(cfg, prep)
    assert torch.isinf(model.head.log_q).sum() == 1  # <unk> never occurs in the synthetic train split
    r = rank_diagnostic(model, load_split(prep, "valid"), 100, 10, CPU)
    assert r["zero_probability_words"] == 1 and 0 < r["rank"] <= 16 + 2


@pytest.mark.skipif(not torch.backends.cpu.get_cpu_capability().startswith("AVX512"),
                    reason="bf16 on a CPU needs torch's AVX-512 kernels (refused otherwise: the test below)")
def test_bf16_training_learns_like_fp32(data, tmp_path):
    p, raw, prep = data
    cfg = run_config(p, "tiny", "softmax")
    fp32 = train(cfg, prep, tmp_path / "fp32", CPU)
    cfg["training"]["precision"] = "bf16"
    bf16 = train(cfg, prep, tmp_path / "bf16", CPU)
    assert bf16["config"]["training"]["precision"] == "bf16"
    assert bf16["best_valid_nll"] < math.log(31) - 0.5  # learned (uniform over 31 ids = log 31)
    assert abs(bf16["best_valid_nll"] - fp32["best_valid_nll"]) < 0.05
    weights = torch.load(tmp_path / "bf16" / "model.pt", weights_only=False)["model"]
    assert all(w.dtype == torch.float32 for w in weights.values() if w.is_floating_point())


def test_bf16_on_a_cpu_without_avx512_is_refused_in_one_line_before_any_work(data, tmp_path, monkeypatch):
    from pipeline_src.io.errors import ConfigError

    p, raw, prep = data
    cfg = run_config(p, "tiny", "softmax")
    cfg["training"]["precision"] = "bf16"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    with pytest.raises(ConfigError, match=r"^key 'training.precision': bf16 on this CPU needs AVX-512 kernels \(torch has AVX2"):
        train(cfg, prep, tmp_path / "bf16", CPU)
    assert not (tmp_path / "bf16" / "train.json").exists()


def test_the_gpu_update_path_is_the_fused_one_and_the_same_update(monkeypatch):
    """On CUDA the dense optimizer is built fused; its update equals the default one (checked on the CPU,
    where PyTorch has fused SGD and Adam too)."""
    import pipeline_src.training.optim as O
    from pipeline_src.config import TrainConfig

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)
            self.head = type("H", (), {"param_groups": lambda self: [], "sparse_params": lambda self: []})()

        def sparse_params(self):
            return []

    for name in ("sgd", "adam"):
        torch.manual_seed(0)
        a, b = Tiny(), Tiny()
        b.load_state_dict(a.state_dict())
        tc = TrainConfig(epochs=1, batch_size=1, bptt=1, optimizer=name, lr=0.1, clip=None, lr_decay=1,
                         eval_batch_size=1)
        plain = O.build_optimizer(a, tc)
        monkeypatch.setattr(O, "fused_if_cuda", lambda ps: {"fused": True})
        fused = O.build_optimizer(b, tc)
        monkeypatch.undo()
        assert fused.optimizers[0].defaults["fused"] is True and not plain.optimizers[0].defaults.get("fused")
        for _ in range(3):
            x = torch.randn(4, 3)
            for m, opt in ((a, plain), (b, fused)):
                opt.zero_grad()
                m.lin(x).pow(2).sum().backward()
                opt.step()
        torch.testing.assert_close(a.lin.weight, b.lin.weight, rtol=0, atol=1e-6)
