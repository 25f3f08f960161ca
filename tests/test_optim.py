"""The row-block sparse Adam against torch's SparseAdam (bitwise) and dense Adam (where every row is touched)."""
import pytest
import torch

from pipeline_src.training.optim import ROW_BLOCK, RowSparseAdam


def sparse_grad(v, d, rows, gen):
    """An uncoalesced sparse gradient, as an embedding lookup makes: repeated rows, in any order."""
    idx = rows[torch.randint(0, len(rows), (2 * len(rows),), generator=gen)]
    return torch.sparse_coo_tensor(idx[None], torch.randn(len(idx), d, generator=gen), (v, d))


@pytest.mark.parametrize("v", [50, 3 * ROW_BLOCK + 7])  # one block, and several with a ragged last one
@pytest.mark.parametrize("ranges", [False, True])  # scattered rows (gathered), or whole ranges (views)
def test_the_same_weights_and_state_as_sparse_adam_bitwise(v, ranges):
    gen = torch.Generator().manual_seed(0)
    start = torch.randn(v, 5, generator=gen)
    a, b = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    ours, torchs = RowSparseAdam([a], lr=0.01, betas=(0.8, 0.95)), torch.optim.SparseAdam([b], lr=0.01, betas=(0.8, 0.95))
    for step in range(6):
        if ranges:  # a hierarchical softmax's classes: a few runs of consecutive rows
            lo = int(torch.randint(0, v // 2, (1,), generator=gen))
            rows = torch.cat([torch.arange(lo, lo + v // 4), torch.arange(v - v // 5, v)]).unique()
        else:  # a sampled head's: scattered
            rows = torch.randperm(v, generator=gen)[: max(1, v // (step + 2))]  # a different set of rows each step
        g = sparse_grad(v, 5, rows, gen)
        a.grad, b.grad = g.clone(), g.clone()
        ours.step(), torchs.step()
        assert torch.equal(a, b)
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(ours.state[a][key], torchs.state[b][key])
    assert ours.state[a]["step"] == torchs.state[b]["step"] == 6
    assert ours.state_dict()["state"][0].keys() == torchs.state_dict()["state"][0].keys()  # checkpoints alike


def test_dense_adam_where_every_row_is_in_every_gradient_and_lazy_elsewhere():
    gen = torch.Generator().manual_seed(1)
    v, d = 40, 3
    start = torch.randn(v, d, generator=gen, dtype=torch.float64)
    a, b = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    # eps ~ 0 (SparseAdam refuses 0): SparseAdam adds eps to sqrt(v) before the bias correction scales it, Adam after
    ours, dense = RowSparseAdam([a], lr=0.05, eps=1e-300), torch.optim.Adam([b], lr=0.05, eps=1e-300)
    for _ in range(5):
        g = torch.randn(v, d, generator=gen, dtype=torch.float64)
        a.grad, b.grad = g.to_sparse(1), g
        ours.step(), dense.step()
    assert torch.allclose(a, b, rtol=1e-12, atol=1e-14)  # bias correction by the parameter's step count, as Adam's
    # a step whose gradient leaves out rows moves neither those rows nor their moments (the lazy variant)
    before, moments = a.detach().clone(), ours.state[a]["exp_avg"].clone()
    a.grad = sparse_grad(v, d, torch.tensor([3, 7]), gen).double()
    ours.step()
    moved = (a.detach() != before).any(1)
    assert moved.nonzero().flatten().tolist() == [3, 7]
    assert torch.equal(ours.state[a]["exp_avg"][~moved], moments[~moved])
    a.grad = torch.randn(v, d, dtype=torch.float64).to_sparse()  # element-sparse: not a row gradient
    with pytest.raises(NotImplementedError, match="sparse in 2 dimensions"):
        ours.step()


def test_coalesced_skips_the_sort_only_where_the_rows_are_already_strictly_increasing():
    from pipeline_src.training.optim import coalesced

    vals = torch.randn(4, 3)
    for rows, ordered in (([0, 2, 5, 9], True), ([2, 0, 5, 9], False), ([0, 2, 2, 9], False)):
        g = torch.sparse_coo_tensor(torch.tensor([rows]), vals, (10, 3))
        assert not g.is_coalesced()
        got, want = coalesced(g), g.coalesce()
        assert got.is_coalesced() and torch.equal(got.to_dense(), want.to_dense())
        assert torch.equal(got._indices(), want._indices()) and torch.equal(got._values(), want._values())
        assert (got._values().data_ptr() == vals.data_ptr()) == ordered  # no copy where nothing is to be sorted
