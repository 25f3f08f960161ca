"""Learning-rate schedules, state carried across epochs, and testing the last epoch's model."""
import dataclasses

import pytest
import torch

from pipeline_src.config import TrainConfig, run_config, validate
from pipeline_src.training.averaging import ParameterAverage
from pipeline_src.training.loop import train
from pipeline_src.training.schedules import asgd_switch, lr_at, next_lr, nt_asgd_trigger

CPU = torch.device("cpu")
BASE = TrainConfig(epochs=39, batch_size=20, bptt=20, optimizer="sgd", lr=20.0, clip=0.25, lr_decay=1.2,
                   eval_batch_size=10)


def test_fixed_then_geometric_is_zarembas_rule():
    tc = dataclasses.replace(BASE, schedule="fixed-then-geometric", decay_start=7)
    # Zaremba et al.'s code: lr * decay ** max(i + 1 - max_epoch, 0), 0-based epoch i, max_epoch 6, decay 1/1.2
    zaremba = [20.0 * (1 / 1.2) ** max(i + 1 - 6, 0) for i in range(39)]
    assert [lr_at(tc, e) for e in range(1, 40)] == pytest.approx(zaremba, rel=1e-12)
    lr, seen = lr_at(tc, 1), []
    for epoch in range(1, 40):  # validation improving or not makes no difference
        seen.append(lr)
        lr = next_lr(tc, epoch, lr, improved=epoch % 3 == 0)
    assert seen == pytest.approx(zaremba, rel=1e-12)
    assert seen[5] == 20.0 and seen[6] == pytest.approx(20 / 1.2) and seen[-1] == pytest.approx(20 / 1.2 ** 33)


def test_plateau_divides_only_when_validation_does_not_improve():
    tc = dataclasses.replace(BASE, lr_decay=4.0)
    assert next_lr(tc, 3, 20.0, improved=True) == 20.0
    assert next_lr(tc, 3, 20.0, improved=False) == 5.0


def test_nt_asgd_trigger_is_the_reference_codes_rule():
    """AWD-LSTM's main.py: switch when len(best_val_loss) > nonmono and val_loss > min(best_val_loss[:-nonmono]),
    best_val_loss being the earlier checks (nonmono >= 1 there; 0 here means "the best of all of them")."""
    def reference(prev, cur, nonmono):
        return len(prev) > nonmono and cur > min(prev[:-nonmono] if nonmono else prev)

    losses = [5.0, 4.0, 3.0, 3.5, 3.2, 2.9, 3.1, 3.05, 3.3, 2.8]
    for nonmono in range(0, 5):
        got = [nt_asgd_trigger(losses[:i], losses[i], nonmono) for i in range(len(losses))]
        assert got == [reference(losses[:i], losses[i], nonmono) for i in range(len(losses))]
    assert nt_asgd_trigger([5.0, 4.0, 3.0], 3.5, 2) is False  # 3.5 is not worse than min([5.0]) = 5.0
    assert nt_asgd_trigger([5.0, 4.0, 3.0, 3.5], 4.5, 2) is True  # 4.5 > min([5.0, 4.0])
    tc = dataclasses.replace(BASE, schedule="nt-asgd")
    assert next_lr(tc, 3, 30.0, improved=False) == 30.0  # a constant rate


def test_parameter_average_is_the_mean_of_the_iterates():
    model = torch.nn.Linear(3, 2)
    avg, seen = ParameterAverage(), []
    avg.start(model)
    before = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)  # a change made outside any step is not averaged in
    with avg.applied(model):  # before any step: the weights at the start
        assert torch.equal(model.weight.detach(), before)
    with torch.no_grad():
        model.weight.sub_(1.0)
    for _ in range(4):
        with torch.no_grad():
            model.weight.add_(torch.randn(2, 3))
        avg.update(model)
        seen.append(model.weight.detach().clone())
    own = model.weight.detach().clone()
    with avg.applied(model):  # the first step's weights left out, as torch.optim.ASGD does (next test)
        torch.testing.assert_close(model.weight.detach(), torch.stack(seen[1:]).mean(0))
    assert torch.equal(model.weight.detach(), own)  # its own weights are back


def test_parameter_average_is_torch_asgd_with_t0_0_and_lambd_0():
    """The reference code's switch, torch.optim.ASGD(lr, t0=0, lambd=0): plain SGD steps and the mean of
    the weights after each of them (ax). SGD + ParameterAverage gives the same weights and mean."""
    torch.manual_seed(0)
    a = torch.nn.Linear(4, 3)
    b = torch.nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    asgd = torch.optim.ASGD(a.parameters(), lr=0.1, t0=0, lambd=0.0)
    sgd = torch.optim.SGD(b.parameters(), lr=0.1)
    avg = ParameterAverage()
    avg.start(b)
    for _ in range(5):
        x = torch.randn(8, 4)
        for m, opt in ((a, asgd), (b, sgd)):
            opt.zero_grad()
            m(x).pow(2).sum().backward()
            opt.step()
        avg.update(b)
    torch.testing.assert_close(b.weight, a.weight)
    with avg.applied(b):
        torch.testing.assert_close(b.weight.detach(), asgd.state[a.weight]["ax"])
        torch.testing.assert_close(b.bias.detach(), asgd.state[a.bias]["ax"])


@pytest.fixture
def data(tiny_data):
    p, _, prep = tiny_data
    return p, prep


def test_the_schedule_drives_the_training_loop_and_last_is_kept(data, tmp_path):
    p, prep = data
    cfg = run_config(p, "tiny", "softmax")
    cfg["training"].update(epochs=4, lr=0.05, lr_decay=2.0, schedule="fixed-then-geometric", decay_start=3,
                           keep="last")
    out = tmp_path / "run"
    summary = train(cfg, prep, out, CPU)
    hist = (out / "history.csv").read_text().splitlines()[1:]
    assert [float(r.split(",")[1]) for r in hist] == [0.05, 0.05, 0.025, 0.0125]
    last, best = torch.load(out / "model.pt", weights_only=False), torch.load(out / "model-best.pt", weights_only=False)
    assert last["epoch"] == 4 and last["valid_nll"] == pytest.approx(summary["last_valid_nll"])
    assert best["valid_nll"] == pytest.approx(summary["best_valid_nll"]) and summary["kept"] == "last"
    assert best["epoch"] == summary["best_epoch"]


def _first_step_state(p, prep, tmp_path, carry: bool) -> list[torch.Tensor]:
    """The LSTM state the first step of epoch 2 starts from, seen through a hook on the encoder."""
    from pipeline_src.encoders.lstm import LSTMEncoder

    cfg = run_config(p, "tiny", "softmax")
    cfg["training"].update(epochs=2, carry_state=carry)

    seen, orig = [], LSTMEncoder.forward

    def spy(self, tokens, state):
        if self.training:
            seen.append(state[0].detach().clone())
        return orig(self, tokens, state)

    LSTMEncoder.forward = spy
    try:
        train(cfg, prep, tmp_path / f"carry{carry}", CPU)
    finally:
        LSTMEncoder.forward = orig
    return seen


def test_carry_state_keeps_the_lstm_state_across_epochs(data, tmp_path):
    p, prep = data
    for carry in (False, True):
        seen = _first_step_state(p, prep, tmp_path, carry)
        per_epoch = len(seen) // 2
        start2 = seen[per_epoch]
        assert torch.count_nonzero(seen[0]) == 0  # epoch 1 starts from zeros either way
        assert (torch.count_nonzero(start2) > 0) == carry


def test_keys_added_later_stay_out_of_run_configs_at_their_old_behaviour(tiny):
    """Runs made before the schedule keys existed keep their config hash (and stay valid)."""
    p = validate(tiny)
    assert not {"schedule", "decay_start", "carry_state", "keep"} & set(run_config(p, "tiny", "softmax")["training"])
    p["training"].update(schedule="fixed-then-geometric", decay_start=3)
    p["datasets"]["tiny"]["training"].update(schedule="fixed-then-geometric", decay_start=3)
    got = run_config(p, "tiny", "softmax")["training"]
    assert got["schedule"] == "fixed-then-geometric" and got["decay_start"] == 3 and "keep" not in got
    assert TrainConfig(**got).keep == "best"


def test_et_asgd_switches_at_its_epoch_whatever_validation_does():
    """Parthiban et al.'s code: with --switch_epoch set the non-monotone trigger is skipped and the switch
    comes at the end of that epoch; without it, the trigger decides."""
    et = dataclasses.replace(BASE, schedule="nt-asgd", asgd_start_epoch=3)
    worse = [5.0, 4.0, 3.0, 3.5, 3.6, 3.7, 3.8]  # the trigger (nonmono 2) fires from the 5th check on
    assert [asgd_switch(et, e, worse[:e - 1], worse[e - 1]) for e in range(1, 8)] == [
        False, False, True, False, False, False, False]
    nt = dataclasses.replace(BASE, schedule="nt-asgd", nonmono=2)
    assert [asgd_switch(nt, e, worse[:e - 1], worse[e - 1]) for e in range(1, 8)] == [
        nt_asgd_trigger(worse[:e - 1], worse[e - 1], 2) for e in range(1, 8)]


def test_et_asgd_averages_from_the_epoch_after_its_switch(data, tmp_path):
    p, prep = data
    cfg = run_config(p, "tiny", "softmax")
    cfg["training"].update(epochs=3, lr=0.05, schedule="nt-asgd", nonmono=100, asgd_start_epoch=1)
    assert train(cfg, prep, tmp_path / "et", CPU)["averaging_from_epoch"] == 2
    cfg["training"]["asgd_start_epoch"] = None  # nonmono 100: the trigger never fires in 3 epochs
    assert "averaging_from_epoch" not in train(cfg, prep, tmp_path / "nt", CPU)


def test_nt_asgd_averages_from_the_trigger_and_keeps_the_mean(data, tmp_path, monkeypatch):
    """Triggered after epoch 1 (the rule forced): model.pt holds the mean of the weights after the steps
    since the switch (the first left out, as torch.optim.ASGD does), and epochs 2.. are validated with it."""
    import pipeline_src.training.epoch as T

    p, prep = data
    cfg = run_config(p, "tiny", "softmax")
    cfg["training"].update(epochs=3, lr=0.05, schedule="nt-asgd", keep="last")
    monkeypatch.setattr(T, "asgd_switch", lambda tc, epoch, prev, cur: True)
    iterates, start, update = [], ParameterAverage.start, ParameterAverage.update

    def spy_start(self, model):
        start(self, model)

    def spy_update(self, model):
        update(self, model)
        iterates.append({n: q.detach().clone() for n, q in model.named_parameters()})

    monkeypatch.setattr(ParameterAverage, "start", spy_start)
    monkeypatch.setattr(ParameterAverage, "update", spy_update)
    summary = train(cfg, prep, tmp_path / "run", CPU)
    assert summary["averaging_from_epoch"] == 2
    kept = torch.load(tmp_path / "run" / "model.pt", weights_only=False)["model"]
    steps_per_epoch = len(iterates) // 2
    assert steps_per_epoch > 0 and len(iterates) == 2 * steps_per_epoch
    for name in ("head.bias", "encoder.lstm.weight_hh_l0"):
        mean = torch.stack([it[name] for it in iterates[1:]]).mean(0)  # the first step's left out (ASGD)
        torch.testing.assert_close(kept[name], mean, rtol=1e-5, atol=1e-6)


def test_variable_bptt_lengths_follow_merity_et_al():
    from pipeline_src.data.batching import variable_lengths

    lengths = variable_lengths(1_000_000, 70, seed=3, epoch=0)
    assert sum(lengths) == 1_000_000 - 1 and min(lengths) >= 5  # covers the data, never below 5 steps
    assert lengths == variable_lengths(1_000_000, 70, seed=3, epoch=0)  # fixed by (seed, epoch)
    assert lengths != variable_lengths(1_000_000, 70, seed=3, epoch=1)
    half = [t for t in lengths[:-1] if t < 52]  # N(35, 5) vs N(70, 5): 52 is 3.4 sd from both
    full = [t for t in lengths[:-1] if t >= 52]
    share = len(half) / len(lengths)
    assert 0.04 < share < 0.06  # bptt / 2 with probability 0.05
    # int() truncates towards zero: the mean of int(N(70, 5)) is 69.5
    assert sum(full) / len(full) == pytest.approx(69.5, abs=0.15)
    assert sum(half) / len(half) == pytest.approx(34.5, abs=0.6)
    sd = (sum((t - 69.5) ** 2 for t in full) / len(full)) ** 0.5
    assert sd == pytest.approx(5.03, abs=0.2)  # N(70, 5) truncated to an integer
    capped = variable_lengths(1_000_000, 70, seed=3, epoch=0, max_len=72)  # Yang et al.: bptt + max_seq_len_delta
    assert max(capped) == 72 and capped[:50] == [min(t, 72) for t in lengths[:50]]


def test_variable_bptt_scales_each_steps_lr_by_its_length(data, tmp_path, monkeypatch):
    from pipeline_src.training.optim import MultiOptimizer

    p, prep = data
    cfg = run_config(p, "tiny", "softmax")
    cfg["training"].update(epochs=1, lr=0.05, bptt=10, variable_bptt=True)
    seen, step = [], MultiOptimizer.step

    def spy(self):
        seen.append(self.param_groups[0]["lr"])
        step(self)

    lengths = []
    import pipeline_src.training.model as M
    loss = M.LanguageModel.loss

    def spy_loss(self, inputs, targets, state):
        lengths.append(inputs.shape[0])
        return loss(self, inputs, targets, state)

    monkeypatch.setattr(MultiOptimizer, "step", spy)
    monkeypatch.setattr(M.LanguageModel, "loss", spy_loss)
    train(cfg, prep, tmp_path / "run", CPU)
    steps = len(seen)
    assert steps > 5 and len(set(lengths[:steps])) > 2  # the lengths vary
    assert seen == pytest.approx([0.05 * t / 10 for t in lengths[:steps]], rel=1e-12)
