"""Several quantile levels in one fit: one split, one budget, one ledger; rearranged non-crossing predictions."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import fdp_flower
from fdp_flower.functional import design
from fdp_flower.outputs.quantiles import rearrange
from fdp_flower.privacy.calibration import analytic_gaussian_epsilon, target_mu
from fdp_flower.privacy.ledger import pld_epsilon

GRID = design.default_grid(30)
DELTA = 1e-5
FAST = dict(n_clients=3, n_components=3, rounds=6, grid=GRID, reference=False)
TAUS = [0.9, 0.1, 0.5]


@pytest.fixture(scope="module")
def data():
    return design.simulate_slice(8, 0, 900, tau=0.5, grid=GRID)


@pytest.fixture(scope="module")
def three(data):
    return fdp_flower.fit(data.curves, data.response, tau=TAUS, eps=1.0, delta=DELTA, seed=4, **FAST)


def test_a_three_quantile_fit_has_one_ledger_the_composition_of_its_releases(three):
    """The combined ledger is every release of the three fits (rounds shifted, nothing else changed); its eps is the
    PLD of the worst site's releases over all levels, and meets the total: each level spent the Gaussian share
    mu / sqrt(3) of (1, 1e-5)."""
    assert three.taus == (0.1, 0.5, 0.9) and len(three) == 3
    released = [r for m in three.models for r in m.ledger.releases]
    per_level = 6 + 8 + 13  # the ADMM rounds, the location/scale search and the level calibration (on by default)
    assert len(three.ledger.releases) == len(released) == 3 * 3 * per_level
    assert [(r.client, r.sensitivity, r.sigma, r.mechanism) for r in three.ledger.releases] == \
        [(r.client, r.sensitivity, r.sigma, r.mechanism) for r in released]
    for client in range(3):
        rounds = [r.round for r in three.ledger.releases if r.client == client]
        assert rounds == list(range(1, 3 * per_level + 1))  # one sequence per site over the three levels
    worst = [r for r in three.ledger.releases if r.client == three.privacy.worst_client]
    assert three.privacy.eps == pytest.approx(pld_epsilon(worst, DELTA), rel=1e-12)
    assert three.privacy.eps == pytest.approx(1.0, abs=2e-3) and three.privacy.eps <= 1.0 + 1e-6
    share = analytic_gaussian_epsilon(target_mu(1.0, DELTA) / np.sqrt(3), DELTA)
    assert [m.privacy.eps for m in three.models] == pytest.approx([share] * 3, rel=2e-3)
    assert share > 1.0 / 3  # the Gaussian share is more than a third of eps


def test_the_levels_share_the_split_and_draw_independent_noise(three, data):
    """Same sites (sizes and rows) in every level; distinct seeds, so the seeded noise of one level never repeats
    another's (the same noise on two queries would release their difference exactly)."""
    assert len({m.sample_sizes for m in three.models}) == 1
    seeds = [m.scenario.seed for m in three.models]
    assert len(set(seeds)) == 3
    again = fdp_flower.fit(data.curves, data.response, tau=[0.1, 0.9], eps=1.0, delta=DELTA, seed=4, **FAST)
    assert [m.scenario.seed for m in again.models] == [seeds[0], seeds[1]]


def test_predictions_are_rearranged_so_the_quantiles_never_cross(three, data):
    raw = np.column_stack([m.predict(data.curves) for m in three.models])
    out = three.predict(data.curves)
    assert out.shape == (900, 3) and np.all(np.diff(out, axis=1) >= 0)
    np.testing.assert_array_equal(np.sort(raw, axis=1), out)
    assert three.crossings(data.curves) == pytest.approx(np.mean(np.any(np.diff(raw, axis=1) < 0, axis=1)))
    from dataclasses import replace

    np.testing.assert_array_equal(replace(three, noncrossing=False).predict(data.curves), raw)


def test_rearrangement_never_moves_predictions_away_from_a_monotone_truth():
    """Chernozhukov et al. (2010), Prop. 4: for a monotone target, the sorted vector is at least as close in every
    l_p norm; 2000 random crossing triples (fixed seed)."""
    rng = np.random.default_rng(0)
    truth = np.sort(rng.standard_normal((2000, 3)), axis=1)
    raw = truth + rng.standard_normal((2000, 3))
    assert np.mean(np.any(np.diff(raw, axis=1) < 0, axis=1)) > 0.3  # many cross
    for p in (1, 2, np.inf):
        assert np.all(np.linalg.norm(rearrange(raw) - truth, ord=p, axis=1)
                      <= np.linalg.norm(raw - truth, ord=p, axis=1) + 1e-12)


def test_bad_levels_are_one_line_errors(data):
    with pytest.raises(ValueError, match="tau: the levels must be distinct"):
        fdp_flower.fit(data.curves, data.response, tau=[0.5, 0.5], **FAST)
    with pytest.raises(ValueError, match=r"tau: expected levels in \(0, 1\)"):
        fdp_flower.fit(data.curves, data.response, tau=[0.2, 1.2], **FAST)
    with pytest.raises(ValueError, match="privacy: several quantile levels share one total budget"):
        fdp_flower.fit(data.curves, data.response, tau=[0.2, 0.8], privacy="per_round", **FAST)


def test_the_estimator_fits_several_levels_on_one_budget_and_one_accountant_charge(data):
    """quantile=[0.1, 0.5, 0.9]: three fits and their inference releases compose (PLD) to the estimator's eps,
    charged to the accountant once; predictions (n, 3) never cross."""
    acc = fdp_flower.PrivacyAccountant(2.0, DELTA)
    est = fdp_flower.FDPQuantileRegressor(quantile=[0.1, 0.5, 0.9], eps=2.0, step=2.0, n_clients=3, n_components=3,
                                         rounds=6, grid=GRID, accountant=acc)
    with warnings.catch_warnings():  # small sites: a level's band may be refused (the fit stands; not tested here)
        warnings.simplefilter("ignore", UserWarning)
        est.fit(data.curves, data.response)
    assert est.predict(data.curves).shape == (900, 3) and np.all(np.diff(est.predict(data.curves), axis=1) >= 0)
    assert est.coef_.n_samples == 3 and est.intercept_.shape == (3,) and len(est.band_) == 3
    assert est.privacy_.eps == pytest.approx(2.0, abs=5e-3) and est.privacy_.eps <= 2.0 + 1e-6
    assert len(acc.fits) == 1 and acc.spent == pytest.approx(est.privacy_.eps, rel=1e-9)
    assert np.isfinite(est.score(data.curves, data.response))
