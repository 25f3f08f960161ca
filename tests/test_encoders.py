"""AWD-LSTM's regularisers against their definitions (Merity et al. 2018), and the encoder contract."""
import dataclasses

import pytest
import torch
from torch import nn

from pipeline_src.config import ConfigError, ModelConfig, run_config, validate
from pipeline_src.encoders.awd import AWDLSTMEncoder, LockedDropout, WeightDropLSTM, embedding_dropout
from pipeline_src.model import LanguageModel

AWD = ModelConfig(emb_dim=6, hidden_dim=10, layers=3, dropout=0.4, tie_weights=True, encoder="awd-lstm",
                  dropout_input=0.65, dropout_hidden=0.3, dropout_embedding=0.1, weight_drop=0.5, ar=2.0, tar=1.0)


def test_locked_dropout_shares_one_mask_across_time_steps():
    torch.manual_seed(0)
    drop = LockedDropout(0.5).train()
    x = torch.rand(7, 64, 32) + 0.5  # (T, B, H), no zeros of its own
    y = drop(x)
    ratio = y / x  # (T, B, H): 0 or 1 / (1 - p)
    assert torch.equal(ratio, ratio[:1].expand_as(ratio))  # the same at every time step
    assert set(torch.unique(ratio).tolist()) <= {0.0, 2.0}
    assert 0.45 < (ratio[0] == 0).float().mean() < 0.55  # p of the units are dropped
    assert not torch.equal(drop(x) / x, ratio)  # a fresh mask per call
    assert torch.equal(drop.eval()(x), x)


def test_embedding_dropout_removes_whole_words_and_rescales():
    torch.manual_seed(0)
    weight = torch.rand(1000, 8) + 0.5
    tokens = torch.randint(1000, (30, 20))
    x = embedding_dropout(weight, tokens, 0.1, training=True)
    dropped = (x == 0).all(-1)  # (T, B): the whole row is zero
    assert torch.equal(dropped, (x == 0).any(-1))  # never part of a row
    torch.testing.assert_close(x[~dropped], weight[tokens][~dropped] / 0.9)  # the rest rescaled by 1 / (1 - p)
    state = {}
    for w, d in zip(tokens.flatten().tolist(), dropped.flatten().tolist()):
        assert state.setdefault(w, d) == d  # every occurrence of a word alike
    assert 0.05 < sum(state.values()) / len(state) < 0.15  # p of the words
    assert torch.equal(embedding_dropout(weight, tokens, 0.1, training=False), weight[tokens])


def test_weight_drop_masks_change_per_pass_and_are_the_same_in_forward_and_backward():
    torch.manual_seed(0)
    layer = WeightDropLSTM(4, 5, 0.5).train()
    x = torch.randn(6, 3, 4)
    state = (torch.zeros(1, 3, 5), torch.zeros(1, 3, 5))
    y, _ = layer(x, state)
    mask = layer.last_mask.clone()
    # forward: exactly an LSTM whose hidden-to-hidden matrix is W * mask / (1 - p)
    ref = nn.LSTM(4, 5, 1)
    ref.load_state_dict(layer.lstm.state_dict())
    with torch.no_grad():
        ref.weight_hh_l0.mul_(mask / 0.5)
    torch.testing.assert_close(y, ref(x, state)[0], rtol=0, atol=1e-6)
    # backward: the raw weight's gradient is the masked one's, times mask / (1 - p): zero where dropped
    y.pow(2).sum().backward()
    ref(x, state)[0].pow(2).sum().backward()
    torch.testing.assert_close(layer.lstm.weight_hh_l0.grad, ref.weight_hh_l0.grad * mask / 0.5, rtol=0, atol=1e-6)
    assert torch.all(layer.lstm.weight_hh_l0.grad[mask == 0] == 0)
    layer(x, state)
    assert not torch.equal(layer.last_mask, mask)  # a new mask on the next pass
    # nothing deleted or re-registered: the layer's parameters are nn.LSTM's own, under their own names
    assert [n for n, _ in layer.named_parameters()] == [
        "lstm.weight_ih_l0", "lstm.weight_hh_l0", "lstm.bias_ih_l0", "lstm.bias_hh_l0"]
    layer.eval()
    torch.testing.assert_close(layer(x, state)[0], nn.LSTM.forward(layer.lstm, x, state)[0])


def test_awd_layer_sizes_state_and_penalty():
    torch.manual_seed(0)
    enc = AWDLSTMEncoder(50, AWD)
    assert enc.sizes == [10, 10, 6] and enc.out_dim == 6  # the last layer is emb_dim when tied
    assert [r.lstm.input_size for r in enc.rnns] == [6, 10, 10]
    state = enc.init_state(4)
    assert [tuple(s.shape) for s in state] == [(1, 4, 10)] * 4 + [(1, 4, 6)] * 2
    untied = AWDLSTMEncoder(50, dataclasses.replace(AWD, tie_weights=False, last_dim=7))
    assert untied.sizes == [10, 10, 7]
    # AR and TAR by their definitions: with no output dropout the dropped output is the raw one
    cfg = dataclasses.replace(AWD, dropout=0.0)
    enc = AWDLSTMEncoder(50, cfg).train()
    tokens = torch.randint(50, (9, 4))
    y, _ = enc(tokens, enc.init_state(4))
    want = 2.0 * y.pow(2).mean() + 1.0 * (y[1:] - y[:-1]).pow(2).mean()
    torch.testing.assert_close(enc.penalty(), want)
    enc.eval()
    enc(tokens, enc.init_state(4))
    assert enc.penalty() == 0.0


class _LossOf(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, tokens, targets, state):
        return self.m.loss(tokens, targets, state)[0]


def test_awd_without_dropouts_is_a_plain_stacked_lstm_and_its_loss_gradients_check():
    """Dropout probabilities 0: the encoder equals a stacked nn.LSTM; the training loss (head + AR + TAR)
    passes gradcheck in float64 with respect to a recurrent weight and the embedding."""
    from torch.func import functional_call

    torch.manual_seed(0)
    cfg = ModelConfig(emb_dim=3, hidden_dim=4, layers=2, dropout=0.0, tie_weights=False, encoder="awd-lstm",
                      ar=2.0, tar=1.0)
    model = LanguageModel(7, cfg, {"type": "softmax"}).double().train()
    tokens, targets = torch.randint(7, (5, 2)), torch.randint(7, (5, 2))
    ref = nn.LSTM(3, 4, 2).double()
    with torch.no_grad():
        for layer, rnn in enumerate(model.encoder.rnns):
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(ref, f"{name}_l{layer}").copy_(getattr(rnn.lstm, f"{name}_l0"))
    state = tuple(s.double() for s in model.init_state(2))
    y, _ = model.encoder(tokens, state)
    h0 = torch.zeros(2, 2, 4, dtype=torch.float64)
    torch.testing.assert_close(y, ref(model.encoder.embedding(tokens), (h0, h0.clone()))[0])
    wrapped = _LossOf(model)
    for name in ("m.encoder.rnns.1.lstm.weight_hh_l0", "m.encoder.embedding.weight"):
        p0 = dict(wrapped.named_parameters())[name].detach().clone().requires_grad_()
        assert torch.autograd.gradcheck(lambda v: functional_call(wrapped, {name: v}, (tokens, targets, state)),
                                        (p0,)), name


def test_encoder_choice_and_awd_keys_in_the_params_file(tiny):
    p = validate(tiny)
    assert "encoder" not in run_config(p, "tiny", "softmax")["model"]  # the default: published hashes hold
    model = {**tiny["datasets"]["tiny"]["model"], "weight_drop": 0.5}
    bad = dict(tiny, datasets={"tiny": {**tiny["datasets"]["tiny"], "model": model}})
    with pytest.raises(ConfigError, match=r"model.weight_drop.*awd-lstm option"):
        validate(bad)
    good = dict(tiny, datasets={"tiny": {**tiny["datasets"]["tiny"], "model": {**model, "encoder": "awd-lstm"}}})
    cfg = run_config(validate(good), "tiny", "softmax")["model"]
    assert cfg["encoder"] == "awd-lstm" and cfg["weight_drop"] == 0.5
    assert isinstance(LanguageModel(30, ModelConfig(**cfg), {"type": "softmax"}).encoder, AWDLSTMEncoder)
