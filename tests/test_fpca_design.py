"""FPCA bases and the paper's simulation design (docs/algorithms.md, sections 1 and 2)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from fdp_flower.functional import design
from fdp_flower.functional.fpca import (
    FunctionalBasis,
    choose_n_components,
    fit_pooled_fpca,
    fixed_basis,
    quadrature_weights,
    simpson_weights,
    trapezoid_weights,
)

GRID = design.default_grid()


@pytest.fixture(scope="module")
def sample():
    return design.simulate_slice(3, 0, 4000, tau=0.5, grid=GRID)


def test_pooled_scores_equal_scikit_fda_transform(sample):
    from skfda import FDataGrid
    from skfda.preprocessing.dim_reduction import FPCA

    basis = fit_pooled_fpca(sample.curves, GRID, n_components=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = FPCA(n_components=6).fit(FDataGrid(sample.curves, GRID))
        expected = reference.transform(FDataGrid(sample.curves, GRID))
    np.testing.assert_allclose(basis.scores(sample.curves), expected, atol=1e-10)


def test_pooled_fpca_recovers_design_eigenfunctions(sample):
    basis = fit_pooled_fpca(sample.curves, GRID, n_components=4)
    truth = design.cosine_functions(GRID, 4)
    overlap = np.abs((basis.components * simpson_weights(GRID)) @ truth.T)
    # eigenvalues k^-2 are well separated; with 4000 curves the estimates are close to +-phi_k
    np.testing.assert_allclose(np.diag(overlap), 1.0, atol=0.02)


def test_explained_variance_chooses_k(sample):
    full = fit_pooled_fpca(sample.curves, GRID, n_components=20)
    basis = fit_pooled_fpca(sample.curves, GRID, explained_variance=0.9)
    k = choose_n_components(full.explained_variance_ratio, 0.9)
    assert basis.n_components == k
    assert np.sum(full.explained_variance_ratio[:k]) >= 0.9 > np.sum(full.explained_variance_ratio[: k - 1])


@pytest.mark.parametrize("family,k", [("cosine", 10), ("fourier", 7), ("bspline", 12)])
def test_fixed_bases_are_orthonormal_on_the_grid(family, k):
    basis = fixed_basis(family, k, GRID)
    gram = (basis.components * basis.weights) @ basis.components.T
    np.testing.assert_allclose(gram, np.eye(k), atol=1e-10)
    assert basis.kind == "fixed" and not basis.mean.any()


def test_fixed_cosine_basis_gives_the_true_scores():
    data = design.simulate_slice(1, 0, 50, tau=0.5, grid=GRID, n_terms=5)
    basis = fixed_basis("cosine", 5, GRID)
    # curves are exact combinations of the first 5 cosines: projection recovers them
    beta_hat = basis.function(basis.scores(data.curves))
    np.testing.assert_allclose(beta_hat, data.curves, atol=1e-3)


def test_misuse_gives_clear_value_errors(sample):
    basis = fixed_basis("cosine", 3, GRID)
    with pytest.raises(ValueError, match="grid points"):
        basis.scores(sample.curves[:, :50])
    bad = sample.curves[:5].copy()
    bad[0, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        basis.scores(bad)
    with pytest.raises(ValueError, match="2-d"):
        basis.scores(sample.curves[0])
    with pytest.raises(ValueError, match="exactly one"):
        fit_pooled_fpca(sample.curves, GRID)
    with pytest.raises(ValueError, match="n_components"):
        fit_pooled_fpca(sample.curves[:5], GRID, n_components=10)
    with pytest.raises(ValueError, match="unknown fixed basis"):
        fixed_basis("wavelet", 3, GRID)
    with pytest.raises(ValueError, match="increasing"):
        fixed_basis("cosine", 3, GRID[::-1])
    with pytest.raises(ValueError, match="lack"):
        FunctionalBasis.from_arrays({"grid": GRID})
    with pytest.raises(ValueError, match="coefficients"):
        basis.function(np.ones(4))


def test_design_is_independent_of_the_split_and_follows_the_model():
    whole = design.simulate_slice(11, 0, 3000, tau=0.25, grid=GRID)
    parts = [design.simulate_partition(11, 3000, 7, i, tau=0.25, grid=GRID) for i in range(7)]
    # same draws; only BLAS blocking of the matrix products may differ (last-bit rounding)
    np.testing.assert_allclose(np.vstack([p.curves for p in parts]), whole.curves, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.concatenate([p.response for p in parts]), whole.response, rtol=0, atol=1e-12)
    assert [p.n_samples for p in parts] == list(np.diff(design.partition_bounds(3000, 7)))
    # the tau-quantile of y given X is int beta X: residuals have empirical tau-quantile ~ 0
    big = design.simulate_slice(11, 0, 40000, tau=0.25, grid=GRID)
    fitted = big.curves @ (design.true_beta(GRID) * simpson_weights(GRID))
    share_below = np.mean(big.response - fitted <= 0)
    assert share_below == pytest.approx(0.25, abs=3 * np.sqrt(0.25 * 0.75 / 40000) + 2e-3)


def test_mise_of_truth_is_zero_and_of_zero_is_norm():
    beta = design.true_beta(GRID)
    assert design.mise(beta, beta, GRID) == 0.0
    # ||beta||^2 = sum w_k^2 (orthonormal cosines), up to Simpson's error on 100 points
    assert design.mise(np.zeros_like(beta), beta, GRID) == pytest.approx(np.sum(design.true_coefficients() ** 2), rel=1e-3)
    with pytest.raises(ValueError, match="cannot split"):
        design.partition_bounds(3, 5)


def _irregular_grid(points=60, seed=5):
    rng = np.random.default_rng(seed)
    return np.r_[0.0, np.sort(rng.uniform(0, 1, points - 2)), 1.0]


def test_quadrature_weights_on_an_irregular_grid_are_positive_and_integrate():
    grid = _irregular_grid()
    assert np.any(simpson_weights(grid) <= 0)  # what the fallback is for
    q = quadrature_weights(grid)
    np.testing.assert_array_equal(q, trapezoid_weights(grid))
    assert np.all(q > 0)
    # trapezoid error for a C^2 function: (b - a) h_max^2 max|f''| / 12
    h = np.diff(grid).max()
    for f, exact, f2 in ((lambda t: t**2, 1 / 3, 2.0), (lambda t: np.cos(np.pi * t) ** 2, 0.5, 2 * np.pi**2)):
        assert abs(q @ f(grid) - exact) <= h**2 * f2 / 12
    np.testing.assert_array_equal(quadrature_weights(GRID), simpson_weights(GRID))


def test_bases_on_an_irregular_grid():
    """Fixed bases are orthonormal in the grid's weighted inner product; pooled FPCA finds the
    design's leading eigenfunctions (up to sign) from curves observed on an irregular grid."""
    grid = _irregular_grid(80)
    q = quadrature_weights(grid)
    for family in ("cosine", "bspline", "fourier"):
        b = fixed_basis(family, 6, grid)
        np.testing.assert_allclose((b.components * q) @ b.components.T, np.eye(6), atol=1e-10)
    data = design.simulate_slice(3, 0, 4000, tau=0.5, grid=grid)
    basis = fit_pooled_fpca(data.curves, grid, n_components=3)
    truth = design.cosine_functions(grid, 3)
    overlap = np.abs((basis.components * q) @ truth.T)
    np.testing.assert_allclose(np.diag(overlap), 1.0, atol=0.02)
    with pytest.raises(ValueError, match="non-equispaced"):
        fit_pooled_fpca(data.curves, grid, n_components=3, method="skfda")


@pytest.mark.parametrize("law", ["t3", "normal", "cauchy"])
def test_error_quantiles_match_scipy_without_importing_it(law):
    """The simulated responses' quantile shift F^{-1}(tau) is computed without SciPy (a deployment's
    ClientApp simulates its slice in a new process per message) and equals SciPy's ppf."""
    from scipy import stats

    ref = {"t3": stats.t(3), "normal": stats.norm(), "cauchy": stats.cauchy()}[law]
    for tau in np.r_[1e-3, np.linspace(0.01, 0.99, 99), 1 - 1e-3]:
        q = design.error_law_quantile(law, float(tau))
        assert q == pytest.approx(ref.ppf(tau), rel=1e-12, abs=1e-14)
    assert design.error_law_quantile(law, 0.5) == 0.0
    with pytest.raises(ValueError, match="tau must be in"):
        design.error_law_quantile(law, 1.0)


#: grids on which equispaced cubic-B-spline knots leave knot intervals without grid points (issue 31):
#: points crowded at 0 (t^3) and a hole in the middle
CROWDED_GRIDS = {"cubed": np.linspace(0, 1, 50) ** 3,
                 "hole": np.r_[np.linspace(0, 0.3, 30), np.linspace(0.7, 1, 30)]}


@pytest.mark.parametrize("name", sorted(CROWDED_GRIDS))
def test_bspline_basis_on_a_crowded_grid_moves_its_knots(name):
    """A 30-function B-spline basis (federated DP-FPCA's default pre-basis) on a grid whose points leave
    some equispaced knot interval empty: the knots move to the grid's quantiles and the basis is orthonormal
    in the grid's weighted inner product (before the fix: LinAlgError 'Matrix is not positive definite')."""
    grid = CROWDED_GRIDS[name]
    q = quadrature_weights(grid)
    b = fixed_basis("bspline", 30, grid)
    np.testing.assert_allclose((b.components * q) @ b.components.T, np.eye(30), atol=1e-8)
    # on an equispaced grid the grid's quantiles are the equispaced knots: the basis is unchanged
    from fdp_flower.functional.fpca import _bspline_functions

    t = GRID
    np.testing.assert_allclose(_bspline_functions(t, 12, np.quantile(t, np.linspace(0, 1, 10))),
                               _bspline_functions(t, 12, np.linspace(0, 1, 10)), atol=1e-12)


def test_linearly_dependent_fixed_basis_is_one_line_error():
    grid = np.r_[np.linspace(0, 0.3, 6), np.linspace(0.7, 1, 6)]
    with pytest.raises(ValueError, match=r"fixed basis 'fourier' with n_components=12 on 12 grid points: the functions "
                                         r"are linearly dependent"):
        fixed_basis("fourier", 12, grid)


@pytest.mark.parametrize("name", sorted(CROWDED_GRIDS))
def test_federated_dp_fpca_fit_on_a_crowded_grid(name):
    """basis="fpca" (federated DP-FPCA on a 30-function B-spline pre-basis) fits on a crowded grid, and its
    components are orthonormal on that grid."""
    import fdp_flower

    grid = CROWDED_GRIDS[name]
    data = design.simulate_slice(4, 0, 1200, tau=0.5, grid=grid)
    model = fdp_flower.fit(data.curves, data.response, grid=grid, basis="fpca", n_components=4, eps=2.0,
                           n_clients=3, rounds=5, reference=False)
    q = quadrature_weights(grid)
    np.testing.assert_allclose((model.basis.components * q) @ model.basis.components.T, np.eye(4), atol=1e-8)
    assert np.all(np.isfinite(model.beta_values)) and model.privacy.eps <= 2.0
