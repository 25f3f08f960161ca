"""One time-budgeted experiment, one kind of machine (pipeline_src/reporting/machine.py)."""
import pytest

from pipeline_src.io.errors import ConfigError
from pipeline_src.io.runtime import PROBE
from pipeline_src.reporting.machine import check_one_machine, machine_problems, machine_record, timed_record


def record(method="softmax", tps=14_000.0, capability="AVX512", gflops=None, seconds=180, model="AMD EPYC"):
    env = {"cpu_capability": capability, "cpu_model": model, **({"gemm_gflops": gflops, "gemm_probe": PROBE} if gflops else {})}
    return {"dataset": "d", "method": method, "tokens_per_s_train": tps, "environment": env,
            "config": {"training": {"budget_seconds": seconds}}}


def test_records_of_one_machine_pass_and_untimed_records_are_not_read():
    same = [timed_record("d/softmax/trial1", record(tps=14_653), picked=True),
            timed_record("d/softmax/seed1", record(tps=13_480), final=True),
            timed_record("d/nce/seed1", record("nce", 136_000, gflops=50.0), final=True),
            timed_record("d/nce/seed2", record("nce", 138_000, gflops=53.0), final=True)]
    assert machine_problems(same) == []
    check_one_machine(same, "here")  # no error
    assert timed_record("d/softmax/seed1", record(seconds=None)) is None  # a token budget: the machine is wall time only


def test_a_sweep_carried_onto_a_slower_machine_is_refused_by_each_reading():
    # the topic language's case: 10k words, the pick on an AVX512 machine, the finals on an AVX2 one 2.5x slower
    pick = timed_record("d/softmax/trial1", record(tps=14_653), picked=True)
    finals = [timed_record(f"d/softmax/seed{s}", record(tps=t, capability="AVX2"), final=True)
              for s, t in ((1, 5_761), (2, 5_727), (3, 5_865))]
    problems = machine_problems([pick, *finals])
    assert len(problems) == 2
    assert problems[0] == "d: their kernels differ (AVX2: 3 records, e.g. d/softmax/seed1; AVX512: 1 record, e.g. d/softmax/trial1)"
    assert problems[1] == "d: d/softmax/seed2 trained 5,727 tokens/s, its picked trial d/softmax/trial1 14,653 with the same settings"
    # the speed probe alone: 26 against 53 GFLOP/s, beyond 1.3x; 40 against 50 is within it
    probed = [timed_record("d/a/seed1", record(gflops=26.0), final=True), timed_record("d/b/seed1", record(gflops=53.0), final=True)]
    assert machine_problems(probed) == ["d: the speed probe ranges from 26.0 GFLOP/s (d/a/seed1) to 53.0 (d/b/seed1), more than 1.3x"]
    assert machine_problems(probed[:1] + [timed_record("d/b/seed1", record(gflops=33.0), final=True)]) == []
    with pytest.raises(ConfigError, match=r"^results/x: these time-budgeted runs of one dataset are not one experiment.*freeze-budgets"):
        check_one_machine([pick, *finals], "results/x")


def test_the_speed_probe_measures_a_product_without_touching_the_random_streams():
    import torch

    from pipeline_src.io.runtime import gemm_gflops

    torch.manual_seed(0)
    before = torch.get_rng_state().clone()
    speed = gemm_gflops(blocks=3, block_seconds=0.01)
    assert torch.equal(torch.get_rng_state(), before) and 0.1 < speed < 1e5  # GFLOP/s of one core, any machine


def test_the_probe_reads_the_fastest_block_so_contention_does_not_move_it():
    from pipeline_src.io.runtime import gemm_gflops

    class Clock:  # each reading advances 1 ms, or 5 ms during its first `slow` readings (another process held the core)
        def __init__(self, slow):
            self.t, self.n, self.slow = 0.0, 0, slow

        def __call__(self):
            self.n += 1
            self.t += 5e-3 if self.n <= self.slow else 1e-3
            return self.t

    free = gemm_gflops(Clock(0), blocks=1, block_seconds=0.01)
    assert gemm_gflops(Clock(6), blocks=3, block_seconds=0.01) == pytest.approx(free, rel=0.15)  # 2 blocks slowed
    assert gemm_gflops(Clock(10**9), blocks=3, block_seconds=0.01) < free / 3  # a slower machine: every block


def test_summary_json_names_the_machine_a_time_budget_ran_on():
    timed = [timed_record("d/nce/seed1", record("nce", gflops=62.5), final=True),
             timed_record("d/nce/trial2", record("nce", gflops=73.6, model="AMD EPYC 9B14")),
             timed_record("d/softmax/seed1", record(), final=True)]
    whole = {"records": 3, "cpu_models": ["AMD EPYC", "AMD EPYC 9B14"], "kernels": ["AVX512"], "gemm_gflops": [62.5, 73.6]}
    assert machine_record(timed) == {**whole, "same_kernels": True, "by_dataset": {"d": whole}}
    assert machine_record([]) is None  # token budgets only: the machine bought nothing


def test_one_slow_final_gpu_records_and_probes_of_another_kind():
    pick = timed_record("d/softmax/trial1", record(tps=14_653), picked=True)
    finals = [timed_record(f"d/softmax/seed{s}", record(tps=t), final=True) for s, t in ((1, 14_500), (2, 14_700), (3, 5_800))]
    # their mean (11,667) is within 1.3x of the pick: each final is read, the slow seed named
    assert machine_problems([pick, *finals]) == [
        "d: d/softmax/seed3 trained 5,800 tokens/s, its picked trial d/softmax/trial1 14,653 with the same settings"]
    gpu = {"device": "cuda:0", "gpu": "NVIDIA H100 80GB HBM3"}
    h100 = timed_record("d/nce/seed1", {**record("nce"), "environment": {"cpu_capability": "AVX512", **gpu}}, final=True)
    a100 = timed_record("d/nce/seed2", {**record("nce"), "environment": {"cpu_capability": "AVX512", "device": "cuda:0",
                                                                        "gpu": "NVIDIA A100-SXM4-80GB"}}, final=True)
    other_host = timed_record("d/nce/seed3", {**record("nce"), "environment": {"cpu_capability": "AVX2", **gpu}}, final=True)
    assert machine_problems([h100, other_host]) == []  # one GPU: the host's CPU kernels do not time its steps
    assert machine_problems([h100, a100])[0].startswith("d: their kernels differ (NVIDIA A100-SXM4-80GB: 1 record")
    new = timed_record("d/a/seed1", {**record(gflops=74.0), "environment": {"cpu_capability": "AVX2", "gemm_gflops": 74.0,
                                                                           "gemm_probe": "fastest block"}}, final=True)
    first = [timed_record(f"d/b/seed{s}", {**record(capability="AVX2"), "environment": {"cpu_capability": "AVX2",
                                                                                     "gemm_gflops": g}}, final=True)
             for s, g in ((1, 47.6), (2, 73.6))]  # the first probe (a 0.3 s wall-clock mean), read on one machine
    assert machine_problems([new, *first]) == []  # not compared: neither with the probe of now nor among themselves
    assert machine_record([new, *first])["gemm_gflops"] == [47.6, 74.0]  # but kept in what summary.json says


def test_each_dataset_is_one_experiment_and_may_have_its_own_machine():
    """Verdicts compare methods within a dataset: a sweep whose 10k words ran on an AVX512 machine and whose 100k
    ran on an AVX2 one is accepted, each size on one machine, and summary.json says the machines differ; one size
    carried over both is refused, named."""
    def at(label, capability, gflops, tps=14_000.0):
        rec = {**record(label.split("/")[1], tps, capability, gflops), "dataset": label.split("/")[0]}
        return timed_record(label, rec, picked=label.endswith("trial1"), final="seed" in label)

    small = [at("zipf-10k/softmax/trial1", "AVX512", 53.0), at("zipf-10k/softmax/seed1", "AVX512", 52.0)]
    large = [at("zipf-100k/softmax/trial1", "AVX2", 26.0, 5_000), at("zipf-100k/softmax/seed1", "AVX2", 25.0, 5_100)]
    assert machine_problems(small + large) == []
    check_one_machine(small + large, "here")  # no error
    said = machine_record(small + large)
    assert said["same_kernels"] is False and said["kernels"] == ["AVX2", "AVX512"]
    assert said["by_dataset"]["zipf-100k"] == {"records": 2, "cpu_models": ["AMD EPYC"], "kernels": ["AVX2"],
                                               "gemm_gflops": [25.0, 26.0]}
    carried = small + [at("zipf-10k/softmax/seed2", "AVX2", 26.0, 5_000)]
    assert [p.split(":")[0] for p in machine_problems(carried + large)] == ["zipf-10k"] * 3  # kernels, probe, final


def test_a_spread_the_params_file_accepts_with_a_reason_is_recorded_not_refused_and_never_other_kernels():
    """statistics.speed_spread_accepted: the probe's spread at one dataset passes with its reason and readings
    returned for summary.json; another dataset's is still refused, and so are other kernels at the accepted one."""
    spread = [timed_record("d/a/trial1", record(gflops=50.0)), timed_record("d/b/trial2", record(gflops=89.0))]
    why = {"d": "identical steps agree within 1.34x; the probe read 50-89 on one loaded machine kind"}
    taken = check_one_machine(spread, "here", why)
    assert taken == {"d": {"reason": why["d"], "problems": [
        "d: the speed probe ranges from 50.0 GFLOP/s (d/a/trial1) to 89.0 (d/b/trial2), more than 1.3x"]}}
    with pytest.raises(ConfigError, match="speed probe ranges from 50.0"):
        check_one_machine(spread, "here", {"e": why["d"]})
    other = spread + [timed_record("d/a/trial3", record(capability="AVX2"))]
    with pytest.raises(ConfigError, match="their kernels differ"):
        check_one_machine(other, "here", why)
    assert check_one_machine(spread[:1], "here", why) == {}  # nothing to accept


def test_an_accepted_spread_names_a_dataset_that_exists(default_params):
    import copy

    from pipeline_src.config import validate

    p = copy.deepcopy(default_params)
    p["statistics"]["speed_spread_accepted"] = {"nowhere": "a reason of twenty characters or more"}
    with pytest.raises(ConfigError, match=r"statistics.speed_spread_accepted.*'nowhere' is not defined under 'datasets'"):
        validate(p)
    p["statistics"]["speed_spread_accepted"] = {"synth": "short"}
    with pytest.raises(ConfigError, match="speed_spread_accepted"):
        validate(p)
