"""PrivacyAccountant: one data set's budget across fits, composed by PLD, refused before training (docs/api.md)."""
from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import FitFailedWarning
from sklearn.model_selection import GridSearchCV

import fdp_flower
from fdp_flower.functional import design
from fdp_flower.privacy.accountant import BudgetExceeded, PrivacyAccountant
from fdp_flower.privacy.calibration import analytic_gaussian_epsilon, target_mu
from fdp_flower.privacy.ledger import pld_epsilon

GRID = design.default_grid(30)
DELTA = 1e-5
FAST = dict(n_clients=2, n_components=3, rounds=5, grid=GRID, reference=False)


@pytest.fixture(scope="module")
def data():
    return design.simulate_slice(5, 0, 600, tau=0.5, grid=GRID)


def _eps_of_fits(k: int, eps_each: float) -> float:
    """The exact eps of k fits that each compose to (eps_each, DELTA): one Gaussian of mu = sqrt(k) mu_each."""
    return analytic_gaussian_epsilon(np.sqrt(k) * target_mu(eps_each, DELTA), DELTA)


def test_fits_compose_by_pld_and_the_fit_past_the_total_is_refused_before_training(data, monkeypatch):
    """Two fits at eps = 1 each spend the composition of both ledgers' most-spending sites (not 2); a third that
    would pass the total is refused before any round runs, and nothing is charged for it; so is a non-private
    fit, and a fit that would reuse a charged fit's seeded noise (however small its eps)."""
    acc = PrivacyAccountant(_eps_of_fits(2, 1.0), DELTA)
    m1 = fdp_flower.fit(data.curves, data.response, eps=1.0, lam=0.01, seed=1, accountant=acc, **FAST)
    m2 = fdp_flower.fit(data.curves, data.response, eps=1.0, lam=0.1, seed=2, accountant=acc, **FAST)
    worst = [[r for r in m.ledger.releases if r.client == m.privacy.worst_client] for m in (m1, m2)]
    assert acc.spent == pytest.approx(pld_epsilon(worst[0] + worst[1], DELTA), rel=1e-9)
    assert acc.spent == pytest.approx(_eps_of_fits(2, 1.0), rel=1e-4) and acc.spent < 1.0 + 1.0
    assert [f.eps_alone for f in acc.fits] == pytest.approx([m1.privacy.eps, m2.privacy.eps], rel=1e-9)
    assert acc.fits[1].eps_after == pytest.approx(acc.spent)

    import fdp_flower.engines.inprocess as engine

    def must_not_train(*args, **kwargs):
        raise AssertionError("the refused fit trained")

    monkeypatch.setattr(engine, "run_fdp_admm", must_not_train)
    with pytest.raises(BudgetExceeded, match=r"fit\(tau=0.5, lam=0.05, eps=0.5\): refused before it releases anything"):
        fdp_flower.fit(data.curves, data.response, eps=0.5, seed=3, accountant=acc, **FAST)
    assert len(acc.fits) == 2
    with pytest.raises(BudgetExceeded, match="without privacy"):
        fdp_flower.fit(data.curves, data.response, eps=None, accountant=acc, **FAST)
    with pytest.raises(BudgetExceeded, match=r"same seeded noise \('seeded', 2\)"):
        fdp_flower.fit(data.curves, data.response, eps=1e-3, seed=2, accountant=acc, **FAST)


def test_largest_fit_is_what_one_more_fit_may_spend():
    """After a fit of mu_1, one more fit of eps = largest_fit() meets the total exactly (Gaussian composition)."""
    acc = PrivacyAccountant(2.0, DELTA)
    acc.charge("first", [fdp_flower.privacy.GaussianRelease(0, 1, 1.0, 1.0 / target_mu(1.0, DELTA))])
    rest = acc.largest_fit()
    assert 2.0 - 1.0 < rest < 2.0  # composed eps is sub-additive: one more fit may spend more than total - spent
    assert acc.check("next", [1.0 / target_mu(rest, DELTA)]) == pytest.approx(2.0, rel=1e-4)
    with pytest.raises(BudgetExceeded):
        acc.check("a bit more", [1.0 / target_mu(rest * 1.01, DELTA)])


def test_one_accountant_is_one_budget_never_a_copy():
    acc = PrivacyAccountant(1.0)
    assert copy.copy(acc) is acc and copy.deepcopy(acc) is acc
    est = fdp_flower.FDPQuantileRegressor(accountant=acc)
    assert clone(est).accountant is acc
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(acc)
    with pytest.raises(ValueError, match="eps_total: expected a finite number > 0"):
        PrivacyAccountant(0.0)
    with pytest.raises(ValueError, match=r"delta: expected a number in \(0, 1\)"):
        PrivacyAccountant(1.0, 1.5)


def test_grid_search_over_alpha_refuses_at_the_total_and_its_ledger_shows_every_fit(data):
    """GridSearchCV(3 alphas x 2 folds + refit) with eps = 1 per fit and a total of 4 fits' composition: four fits
    run and are charged, the fifth is refused before training (error_score='raise' surfaces the refusal); with
    scikit-learn's default error_score the refused fits are reported failed and the final refit is refused.  The
    noise comes from the OS (one random_state for every fit of a search would reuse seeded noise: refused)."""
    est = fdp_flower.FDPQuantileRegressor(eps=1.0, inference_share=None, n_clients=2, n_components=3, rounds=5,
                                         grid=GRID, noise_source="os_entropy")
    total = _eps_of_fits(4, 1.0)
    acc = PrivacyAccountant(total, DELTA)
    search = GridSearchCV(est.set_params(accountant=acc), {"alpha": [0.0, 0.01, 0.1]}, cv=2, error_score="raise")
    with pytest.raises(BudgetExceeded, match="refused before it releases anything"):
        search.fit(data.curves, data.response)
    assert len(acc.fits) == 4
    assert all(f.eps_alone == pytest.approx(1.0, abs=2e-3) for f in acc.fits)
    assert np.all(np.diff([f.eps_after for f in acc.fits]) > 0)
    assert acc.fits[-1].eps_after == pytest.approx(total, rel=1e-4)
    assert acc.spent <= total * (1 + 1e-4)
    assert "alpha=0.01" in acc.table() and acc.table().count("FDPQuantileRegressor") == 4

    acc2 = PrivacyAccountant(total, DELTA)
    search = GridSearchCV(clone(est).set_params(accountant=acc2), {"alpha": [0.0, 0.01, 0.1]}, cv=2)
    with pytest.warns(FitFailedWarning, match="2 fits failed out of a total of 6") as caught, \
            pytest.raises(BudgetExceeded, match="refused before it releases anything"):
        search.fit(data.curves, data.response)
    assert any("BudgetExceeded" in str(w.message) for w in caught)
    assert len(acc2.fits) == 4 and acc2.spent <= total * (1 + 1e-4)


def test_a_search_with_one_seeded_random_state_is_refused_at_its_second_fit(data):
    acc = PrivacyAccountant(100.0, DELTA)
    est = fdp_flower.FDPQuantileRegressor(eps=1.0, inference_share=None, n_clients=2, n_components=3, rounds=5,
                                         grid=GRID, accountant=acc)
    with pytest.raises(BudgetExceeded, match="same seeded noise"):
        GridSearchCV(est, {"alpha": [0.0, 0.1]}, cv=2, error_score="raise").fit(data.curves, data.response)
    assert len(acc.fits) == 1


def test_select_lam_spends_from_the_accountant_and_says_what_it_spent(data):
    """2 lams x 2 folds at eps_per_fit = 1: four fits and four noisy validation losses, each pair composing to
    eps = 1, the selection to the four pairs' composition; a second selection is refused before its first fit."""
    total = _eps_of_fits(4, 1.0)
    acc = PrivacyAccountant(total, DELTA)
    chosen = fdp_flower.select_lam(data.curves, data.response, [0.0, 0.5], accountant=acc, eps_per_fit=1.0,
                                   loss_clip=3.0, cv=2, seed=1, **{k: v for k, v in FAST.items() if k != "grid"},
                                   grid=GRID)
    assert chosen.lam in (0.0, 0.5) and chosen.fits == 4 and chosen.losses.shape == (2,)
    assert len(acc.fits) == 8  # four fits and four validation releases
    validation = [f for f in acc.fits if f.name.startswith("validation loss")]
    assert len(validation) == 4 and all(f.releases == 1 for f in validation)
    assert chosen.eps_selection == pytest.approx(total, rel=1e-4) and acc.spent == pytest.approx(total, rel=1e-4)
    assert f"eps = {chosen.eps_selection:.4g} for the selection alone" in str(chosen)
    with pytest.raises(BudgetExceeded, match=r"select_lam\(2 lams x 2 folds, eps_per_fit=1\): refused before"):
        fdp_flower.select_lam(data.curves, data.response, [0.0, 0.5], accountant=acc, eps_per_fit=1.0, loss_clip=3.0,
                              cv=2, seed=2, grid=GRID)
    assert len(acc.fits) == 8


def test_infer_checks_and_charges_its_releases(data):
    """A fit at fit_budget(2) and its inference releases (eps_total 2) charged to one accountant: the second entry
    is the three releases of the site that spent most, and the composition is the model's own total (2)."""
    from fdp_flower.inference.releases import fit_budget

    acc = PrivacyAccountant(2.0, DELTA)
    model = fdp_flower.fit(data.curves, data.response, eps=fit_budget(2.0, DELTA), seed=7, accountant=acc,
                           **{**FAST, "step": 2.0}, level_calibration=False)  # the 5 ADMM rounds alone
    full = fdp_flower.infer(model, data.curves, data.response, eps_total=2.0, grid=GRID, accountant=acc)
    assert [f.releases for f in acc.fits] == [5, 3]
    assert acc.spent == pytest.approx(full.privacy.eps, rel=1e-6) and acc.spent == pytest.approx(2.0, abs=5e-3)
    tight = PrivacyAccountant(1.9, DELTA)  # the fit fits in it, fit and inference (2) do not
    tight.charge("the fit", model.ledger)
    with pytest.raises(BudgetExceeded, match=r"infer\(tau=0.5, eps_total=2.0\): refused before it releases anything"):
        fdp_flower.infer(model, data.curves, data.response, eps_total=2.0, grid=GRID, accountant=tight)
    assert len(tight.fits) == 1
