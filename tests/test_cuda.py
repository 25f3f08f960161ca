"""The CUDA path: every head, the training loop and evaluation on a GPU agree with the CPU.

Skipped where no GPU is present (CI has none); run on a GPU machine with `pytest tests/test_cuda.py`.
The CPU is the reference: the heads' CPU paths are checked against closed forms and finite differences
in the other test files, so agreement here carries those checks over to the GPU kernels (and to the
branches that run only there, e.g. sigsoftmax's log-sigmoid block form and the fused optimizer).
"""
import math

import pytest
import torch
from test_heads import check_bf16_training_step

from pipeline_src.config import run_config
from pipeline_src.evaluation.evaluate import evaluate
from pipeline_src.heads import HeadContext, build_head, options_schema, registry
from pipeline_src.training.loop import train
from pipeline_src.training.step import build_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CPU, GPU = torch.device("cpu"), torch.device("cuda")
V, D, N = 300, 16, 64
SAMPLED = {n for n, c in registry().items() if "negatives" in options_schema(c)["properties"]}


def _pair(name: str):
    spec = {"type": name, **({"negatives": 20} if name in SAMPLED else {})}
    torch.manual_seed(0)
    cpu = build_head(spec, HeadContext(vocab_size=V, in_dim=D, unigram_counts=torch.arange(V, 0, -1)))
    gpu = build_head(spec, HeadContext(vocab_size=V, in_dim=D, unigram_counts=torch.arange(V, 0, -1)))
    gpu.load_state_dict(cpu.state_dict())
    return cpu, gpu.to(GPU)


@pytest.mark.parametrize("name", sorted(registry()))
@pytest.mark.parametrize("scale", [1.0, 30.0])  # 30: logits far below -30, sigsoftmax's other block form
def test_every_head_gives_the_same_exact_log_probs_on_the_gpu(name, scale):
    cpu, gpu = _pair(name)
    g = torch.Generator().manual_seed(1)
    h = torch.randn(N, D, generator=g) * scale
    with torch.no_grad():
        a, b = cpu.eval().log_prob(h), gpu.eval().log_prob(h.to(GPU)).cpu()
    assert torch.allclose(torch.logsumexp(b, 1), torch.zeros(N), atol=1e-4)
    torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-3 * scale)


@pytest.mark.parametrize("name", sorted(set(registry()) - SAMPLED))
def test_every_exact_head_gives_the_same_loss_and_gradients_on_the_gpu(name):
    cpu, gpu = _pair(name)
    g = torch.Generator().manual_seed(2)
    h, t = torch.randn(N, D, generator=g), torch.randint(0, V, (N,), generator=g)
    out = []
    for head, dev in ((cpu, CPU), (gpu, GPU)):
        head.train()
        torch.manual_seed(3)  # context dropout (MoS's option) draws its mask from the device's generator
        x = h.to(dev).requires_grad_()
        loss = head.loss(x, t.to(dev))
        grads = torch.autograd.grad(loss, [x, *head.parameters()])
        out.append((loss.item(), [gr.to_dense().cpu() for gr in grads]))
    (l_cpu, g_cpu), (l_gpu, g_gpu) = out
    assert math.isclose(l_gpu, l_cpu, rel_tol=1e-5)
    for a, b in zip(g_cpu, g_gpu):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", sorted(SAMPLED))
def test_every_sampled_head_trains_on_the_gpu(name):
    """Negatives come from the device's generator, so the CPU's draws cannot be replayed: the surrogate
    loss is finite and a few steps of SGD on one batch lower it, with every gradient on the GPU."""
    _, gpu = _pair(name)
    g = torch.Generator().manual_seed(4)
    h, t = torch.randn(N, D, generator=g).to(GPU), torch.randint(0, V, (N,), generator=g).to(GPU)
    nll = lambda: -gpu.target_log_prob(h, t).mean().item()  # noqa: E731  exact, normalised
    before = nll()
    opt = torch.optim.SGD(gpu.parameters(), lr=0.5)
    for _ in range(30):
        opt.zero_grad()
        loss = gpu.train().loss(h, t)
        assert torch.isfinite(loss)
        loss.backward()
        assert all(p.grad.device.type == "cuda" for p in gpu.parameters() if p.grad is not None)
        opt.step()
    assert nll() < before


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_head_trains_under_bf16_autocast_on_the_gpu(name):
    check_bf16_training_step(name, GPU)  # CUDA autocast casts differently from the CPU's (log_softmax to fp32)


@pytest.mark.parametrize("method", ["softmax", "mos", "nce"])
def test_training_and_evaluation_on_the_gpu_match_the_cpu(tiny_data, tmp_path, method):
    """The whole loop on both devices from the same seed: the same data order and initial weights and no dropout, so the
    learning curves agree to float32 reduction-order noise (NCE's negatives differ: generators are per device); evaluation of one trained model gives the same perplexity on both."""
    p, raw, prep = tiny_data
    p["methods"] = {"softmax": {"type": "softmax"}, "mos": {"type": "mos", "components": 3},
                    "nce": {"type": "nce", "negatives": 10}}
    cfg = run_config(p, "tiny", method)
    cfg["model"]["dropout"] = 0.0  # no dropout masks: only the sampled heads' negatives differ by device
    res = {dev.type: train(cfg, prep, tmp_path / dev.type, dev) for dev in (CPU, GPU)}
    assert res["cuda"]["device"].startswith("cuda") and res["cuda"]["status"] == "ok"
    assert abs(res["cuda"]["best_valid_nll"] - res["cpu"]["best_valid_nll"]) < 0.05
    model = build_model(cfg, prep)
    model.load_state_dict(torch.load(tmp_path / "cuda" / "model.pt", weights_only=False)["model"])
    on = {dev.type: evaluate(model.to(dev), cfg, prep, raw, dev) for dev in (CPU, GPU)}
    for split in ("valid", "test"):
        assert math.isclose(on["cuda"][split]["ppl"], on["cpu"][split]["ppl"], rel_tol=1e-4)
    assert abs(on["cuda"]["rank"]["rank"] - on["cpu"]["rank"]["rank"]) <= 1  # SVD threshold ties


def test_an_interrupted_run_resumes_on_the_gpu(tiny_data, tmp_path):
    """A checkpoint read back with map_location=cuda holds its RNG states on the GPU; resuming sets them
    (on the CPU, as the setters want) and the run finishes as the uninterrupted one did."""
    p, raw, prep = tiny_data
    cfg = run_config(p, "tiny", "softmax")
    cfg["training"]["checkpoint_every_steps"] = 4
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    train(cfg, prep, ref, GPU)
    assert train(cfg, prep, cut, GPU, stop_after_steps=7) is None
    train(cfg, prep, cut, GPU)
    a = torch.load(ref / "model.pt", weights_only=False)["model"]
    b = torch.load(cut / "model.pt", weights_only=False)["model"]
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5)
