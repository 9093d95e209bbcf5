"""Issue 9 levers: the released estimator (last / average / tail average) and the total-budget defaults."""
import numpy as np
import pytest

from fdp_flower.algorithms.faults import advance_with_failures, draw_failures
from fdp_flower.algorithms.fdp_admm.config import TOTAL_BUDGET_DEFAULTS, parse_scenario, privacy_off_schedule
from fdp_flower.algorithms.fdp_admm.plan import noise_plan
from fdp_flower.algorithms.fdp_admm.update import FDPADMMState, tail_start_round
from fdp_flower.engines.batched import run_batched
from fdp_flower.engines.inprocess import run_fdp_admm
from tests.test_faults import error_reply, run_strategy, task_identity  # noqa: F401 (fixture)

SMALL = {"seed": 4, "data": {"n_samples": 4000}, "federation": {"num_clients": 4}}


def test_tail_start_round():
    assert tail_start_round(160, 0.5) == 81  # the last 80 rounds
    assert tail_start_round(10, 0.25) == 8  # ceil(2.5) = 3 rounds
    assert tail_start_round(7, 1.0) == 1
    assert tail_start_round(5, 0.01) == 5  # at least one round
    with pytest.raises(ValueError, match="tail fraction"):
        tail_start_round(10, 0.0)


def test_estimators_equal_direct_computation_with_and_without_failures():
    rng = np.random.default_rng(0)
    m, k, rounds = 5, 3, 9
    start = tail_start_round(rounds, 0.4)  # rounds 6..9
    state = FDPADMMState.initial(m, k, tail_start=start)
    ws = []
    for l in range(1, rounds + 1):
        primals = rng.normal(size=(m, k))
        if l % 3 == 0:  # the server step of a round with failed clients keeps the running sums too
            state = advance_with_failures(state, np.arange(m) != 2, primals, 0.1)
        else:
            state = state.advance(primals, 0.1)
        ws.append(state.global_w)
        if l < start:  # before the tail starts the tail average is the last iterate
            np.testing.assert_array_equal(state.estimate("tail_average"), state.global_w)
    ws = np.array(ws)
    np.testing.assert_array_equal(state.estimate("last"), ws[-1])
    np.testing.assert_allclose(state.estimate("average"), ws.mean(0), rtol=1e-13)
    np.testing.assert_allclose(state.estimate("tail_average"), ws[start - 1:].mean(0), rtol=1e-13)
    back = FDPADMMState.from_arrays(state.to_arrays())  # checkpoints keep the tail sum
    np.testing.assert_array_equal(back.estimate("tail_average"), state.estimate("tail_average"))
    with pytest.raises(ValueError, match="estimator"):
        state.estimate("median")


def test_engines_report_the_same_tail_average_as_a_direct_computation():
    sc = parse_scenario({**SMALL, "algorithm": {"rounds": 12, "step": {"kind": "constant", "eta0": 3.0},
                                                "estimator": {"kind": "tail_average", "tail_fraction": 0.5}},
                         "privacy": {"mode": "total", "eps": 1.0}})
    ref = run_fdp_admm(sc, with_reference=False)
    (batched,) = run_batched([sc], trace=True)
    direct = batched.trace[6:].mean(0)  # w^7 .. w^12
    np.testing.assert_allclose(batched.estimate_w, direct, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ref.state.estimate("tail_average"), direct, rtol=1e-9, atol=1e-12)
    assert ref.history[-1]["mise_estimate"] == pytest.approx(batched.final["mise_estimate"], rel=1e-9)
    assert ref.history[-1]["mise_avg"] == pytest.approx(batched.final["mise_avg"], rel=1e-9)


def test_total_mode_takes_its_own_defaults_and_explicit_values_win():
    total = parse_scenario({**SMALL, "algorithm": {"rule": "admm"}, "privacy": {"mode": "total", "eps": 1.0}})
    for key, value in TOTAL_BUDGET_DEFAULTS.items():
        assert getattr(total.algorithm, key).model_dump() == value if isinstance(value, dict) \
            else getattr(total.algorithm, key) == value
    per_round = parse_scenario({**SMALL, "privacy": {"mode": "per_round", "eps": 0.5}})
    assert per_round.algorithm.rounds == 30 and per_round.algorithm.estimator.kind == "last"
    assert per_round.algorithm.step.kind == "theorem2"
    off = parse_scenario({**SMALL, "algorithm": {"rule": "admm"}, "privacy": {"mode": "total", "enabled": False}})
    assert off.algorithm.rounds == privacy_off_schedule(off.model.clip_shape)["rounds"]  # fit's and run's one source
    mine = parse_scenario({**SMALL, "algorithm": {"rounds": 7}, "privacy": {"mode": "total", "eps": 1.0}})
    assert mine.algorithm.rounds == 7 and mine.algorithm.estimator == total.algorithm.estimator
    # the resolved scenario round-trips
    assert parse_scenario(total.model_dump(mode="json")) == total


@pytest.mark.parametrize("eps", [0.3, 1.0])
def test_total_mode_defaults_spend_at_most_the_target(eps):
    sc = parse_scenario({**SMALL, "algorithm": {"rule": "admm"},
                         "privacy": {"mode": "total", "eps": eps, "delta": 1.0e-5}})
    result = run_fdp_admm(sc, with_reference=False)
    assert len(result.history) == sc.algorithm.rounds == TOTAL_BUDGET_DEFAULTS["rounds"]
    assert result.stop_reason == "completed"
    spent = result.ledger.worst_case(1e-5).eps_pld
    assert 0.97 * eps <= spent <= eps
    # the calibrated noise follows the step: sigma / Delta is the one calibrated multiplier
    plan = noise_plan(sc, result.basis)
    _, sens, sigma = plan.release(sc.algorithm.rounds, result.sample_sizes)
    np.testing.assert_allclose(sigma / sens, plan.noise_multiplier, rtol=1e-12)


@pytest.mark.usefixtures("task_identity")
def test_flower_strategy_releases_the_same_tail_average_as_the_inprocess_engine():
    """The Flower strategy (over an in-memory grid running the real client handler, with error
    replies where the in-process failure stream fails clients: 1-2 of 4 every round with seed 6)
    keeps the same tail sum."""

    sc = parse_scenario({**SMALL, "seed": 6, "algorithm": {"rounds": 8, "estimator": {"kind": "tail_average",
                                                                           "tail_fraction": 0.5}},
                         "faults": {"failure_rate": 0.3, "quorum": 0.1},
                         "privacy": {"mode": "total", "eps": 1.0}})
    local = run_fdp_admm(sc, with_reference=False)
    m = sc.federation.num_clients

    def fail(rnd, client, msg, reply):
        return error_reply(msg) if draw_failures(sc.seed, rnd, m, 0.3)[client] else reply

    strategy, _ = run_strategy(sc, fail)
    assert strategy.state.tail_start == local.state.tail_start == 5
    np.testing.assert_allclose(strategy.state.estimate("tail_average"), local.state.estimate("tail_average"),
                               rtol=0, atol=1e-12)
    assert strategy.history[-1]["mise_estimate"] == pytest.approx(local.history[-1]["mise_estimate"], rel=1e-9)
