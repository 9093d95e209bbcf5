"""A scikit-learn estimator for private functional quantile regression, and private inference on a fit.

- :class:`FDPQuantileRegressor`: FDP-ADMM (F-ADMM with ``eps=None``) as a scikit-learn regressor:
  ``__init__`` stores parameters, ``fit(X, y)`` returns self, learned attributes end in ``_``,
  ``predict``, ``score`` (the pinball-loss skill score D^2), ``get_params`` / ``set_params``,
  ``clone`` and ``GridSearchCV`` work; X is an ``skfda.FDataGrid``, an ``skfda.FDataBasis`` or an
  (n, G) array of curves on a grid.  By default the fit keeps a share of the budget for the inference
  releases, so ``band_`` (confidence bands) and ``summary()`` come with it (docs/inference.md).
- :func:`infer`: the inference releases for a model of :func:`fdp_flower.fit`, on the same simulated
  sites, charged to its ledger;
- :func:`select_lam`: ``lam`` by private cross-validation, spending from a :class:`PrivacyAccountant`.

The short form stays :func:`fdp_flower.fit`; the reference of every parameter is docs/api.md.
"""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

__all__ = ["FDPQuantileRegressor", "LamSelection", "infer", "select_lam"]


def _site_parts(values: np.ndarray, y: np.ndarray, model, client_ids) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every site's (curves, responses) in the fit's split (the model's seed and client count, or the labels)."""
    from fdp_flower.api import client_partition

    n_clients = None if client_ids is not None else int(model.scenario.federation.num_clients)
    parts, _ = client_partition(len(y), n_clients=n_clients, client_ids=client_ids, seed=int(model.scenario.seed))
    return [(values[rows], y[rows]) for rows in parts]


def infer(model, curves, y, *, eps_total: float | None = None, client_ids=None, grid=None, accountant=None):
    """The inference releases of a fitted FDP-ADMM model, on the same simulated sites as its fit.

    Every site releases, at the model's estimate, a noisy histogram of its residuals' scale, a noisy Gram
    matrix of its clipped rows and a noisy count of residuals near the quantile (docs/inference.md); the
    releases are charged to the model's ledger.  Returns the model with them (``confidence_band()`` and the
    intervals of ``summary()`` then work).

    Parameters
    ----------
    model : FunctionalModel
        A model of :func:`fdp_flower.fit` on ``curves``, ``y``.
    curves, y, grid, client_ids :
        The data and split of that fit (as given to it: ``client_ids`` if the fit had them, else the model's
        seed and client count split the rows again).
    eps_total : float or None
        The total eps (at the model's delta) that the fit and these releases share; must exceed what the fit
        spent.  Needed when the model is private; the releases are calibrated to meet it exactly (PLD).  To
        keep a total of eps, fit with ``eps = fdp_flower.inference.releases.fit_budget(eps, delta)``, or use
        :class:`FDPQuantileRegressor`, which does this.
    accountant : PrivacyAccountant or None
        The data set's budget: the three releases per site are checked against it before any is made and
        charged to it after (the fit must be charged too: pass the same accountant to ``fit``).
    """
    from fdp_flower.api import curve_inputs
    from fdp_flower.inference.inprocess import check_inferable, run_inference

    check_inferable(model)
    values, response, own_grid, _ = curve_inputs(curves, y, grid=grid)
    if own_grid.shape != model.grid.shape or not np.allclose(own_grid, model.grid, rtol=1e-9, atol=0):
        raise ValueError("curves: not on the model's grid (give the data the model was fitted on)")
    if model.privacy.private and eps_total is not None and eps_total <= model.privacy.eps:
        raise ValueError(f"eps_total: {eps_total:g} leaves nothing for inference: the fit alone spent "
                         f"eps = {model.privacy.eps:.4g}")
    label = f"infer(tau={float(model.scenario.model.loss.tau):g}, eps_total={eps_total})"
    if accountant is not None:
        planned = None
        if model.privacy.private:
            from fdp_flower.inference.fdp_admm import fit_multipliers
            from fdp_flower.inference.releases import inference_multipliers

            if eps_total is None:
                raise ValueError("eps_total: a private model needs the total budget its fit and the inference share")
            planned = list(inference_multipliers(float(eps_total), float(model.privacy.delta),
                                                 fit_multipliers(model.ledger, int(model.privacy.worst_client))))
        # the noise is the fit's seeded stream at round L + 1 (no fit round): not a repeat of the fit's
        accountant.check(label, planned)
    record = run_inference(model, _site_parts(values, response, model, client_ids), eps_total=eps_total)
    if accountant is not None:
        accountant.charge(label, list(record.releases))
    return model.with_inference(record)


class FDPQuantileRegressor(RegressorMixin, BaseEstimator):
    """Differentially private functional quantile regression (FDP-ADMM) as a scikit-learn regressor.

    Q_quantile(y | X) = intercept_ + int coef_(t) X(t) dt, fitted across ``n_clients`` simulated sites that
    release only Gaussian-noised quantities (Zhou & Xiang 2022; docs/api.md, docs/inference.md).

    Parameters
    ----------
    quantile : float or sequence of floats
        The quantile level tau (scikit-learn's ``QuantileRegressor`` name; default: 0.5).  Several levels (e.g.
        ``[0.1, 0.5, 0.9]``) share the budget (each level's fit and inference get mu / sqrt(Q) of the total's
        Gaussian mu; :func:`fdp_flower.fit`): ``predict`` returns (n, Q) rearranged so that the quantiles never
        cross, ``coef_`` holds Q functions, ``intercept_`` and ``band_`` one entry per level, ``score`` is the
        mean D^2 over the levels and ``model_`` a :class:`~fdp_flower.outputs.quantiles.QuantileModels`.
    alpha : float
        Weight of the penalty on the *average* check loss, as in ``QuantileRegressor``: the objective is
        (1/M) sum_i (1/m_i) sum_j rho_tau(...) + alpha P(w), i.e. ``lam = alpha * n_clients`` of
        :func:`fdp_flower.fit` (default: 0.0, no penalty: the intervals are those of the unpenalized
        estimator; with a penalty they are debiased to first order, docs/inference.md).
    penalty : str
        P when ``alpha > 0``: "l1" (default), "l2", "elastic_net", "scad", "mcp".
    eps, delta : float
        The total privacy budget of every site, fit and inference together (defaults: 1.0, 1e-5);
        ``eps=None``: F-ADMM, no noise and no guarantee.
    inference_share : float or None
        The share of the budget (of mu^2, Gaussian DP; docs/inference.md) kept for the inference releases
        (default: 0.15); None: no inference releases, the whole budget goes to the fit (no ``band_``).
    confidence_level : float
        The level of ``band_`` and of ``summary()`` (default: 0.95).
    n_clients : int
        Number of simulated sites the rows are split over (default: 10); or ``client_ids`` in ``fit``.
    basis, n_components, clip, clip_shape, intercept_share, response_offset, response_scale, rho, step, rounds,
    estimator, basis_eps, basis_delta, noise_source :
        As in :func:`fdp_flower.fit` (defaults: "cosine", 10, 3.0, "sphere", 0.5, None, None, None, None, None,
        None, None, None, "seeded"; ``response_offset`` / ``response_scale`` None: without privacy the
        response's median and IQR / 1.349, with privacy 0 and 1 -- the fitted quantiles move with the response's
        location and scale).
    fit_intercept : bool
        Fit an intercept (through the public column c0 = intercept_share * clip; default: True).
    grid : array or None
        The grid of array input (default: G equispaced points on [0, 1]), or where an FDataBasis is evaluated
        (default: 100 points over its domain).
    random_state : int
        Seeds the split over sites, the basis phase and the noise (default: 0).  With
        ``noise_source="seeded"`` the fit is reproducible; a private fit is otherwise random.
    accountant : PrivacyAccountant or None
        The data set's budget across fits (:class:`fdp_flower.PrivacyAccountant`; default: None).  Every ``fit``
        is checked against it before training (refused with ``BudgetExceeded`` past its total) and charged to
        it after; ``clone`` and ``GridSearchCV`` (``n_jobs=1``) share it, so a search spends from one budget.
        Fits that share an accountant need independent noise: with ``noise_source="seeded"`` a second fit with
        the same ``random_state`` is refused (use ``noise_source="os_entropy"`` for a search).

    Attributes
    ----------
    model_ : FunctionalModel
        The fitted model (ledger, history, scenario, ``summary()``, ``confidence_band()``, ``save()``).
    coef_ : skfda.FDataGrid
        The released coefficient function beta_hat on ``grid_``.
    intercept_ : float
    grid_ : ndarray
    band_ : ConfidenceBand or None
        Pointwise and simultaneous bands at ``confidence_level`` (None without inference releases).
    privacy_ : PrivacyReport
        eps (PLD) of the site that spent most over all its releases, delta, neighbouring relation.
    n_features_in_ : int
        Number of grid points of the curves.
    """

    def __init__(self, quantile: float = 0.5, alpha: float = 0.0, *, penalty: str = "l1", eps: float | None = 1.0,
                 delta: float = 1e-5, inference_share: float | None = 0.15, confidence_level: float = 0.95,
                 n_clients: int = 10, basis="cosine", n_components: int = 10, clip: float = 3.0,
                 clip_shape: str = "sphere", fit_intercept: bool = True, intercept_share: float = 0.5,
                 response_offset: float | None = None,
                 response_scale: float | None = None, rho: float | None = None, step: float | None = None,
                 rounds: int | None = None,
                 estimator: str | None = None, basis_eps: float | None = None, basis_delta: float | None = None,
                 noise_source: str = "seeded", grid=None, random_state: int = 0, accountant=None):
        self.quantile = quantile
        self.alpha = alpha
        self.penalty = penalty
        self.eps = eps
        self.delta = delta
        self.inference_share = inference_share
        self.confidence_level = confidence_level
        self.n_clients = n_clients
        self.basis = basis
        self.n_components = n_components
        self.clip = clip
        self.clip_shape = clip_shape
        self.fit_intercept = fit_intercept
        self.intercept_share = intercept_share
        self.response_offset = response_offset
        self.response_scale = response_scale
        self.rho = rho
        self.step = step
        self.rounds = rounds
        self.estimator = estimator
        self.basis_eps = basis_eps
        self.basis_delta = basis_delta
        self.noise_source = noise_source
        self.grid = grid
        self.random_state = random_state
        self.accountant = accountant

    # ------------------------------------------------------------ scikit-learn plumbing
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.target_tags.required = True
        return tags

    def _validated(self, X, y=None, *, fitting: bool):
        """(values (n, G), y or None, grid): an FDataGrid / FDataBasis evaluated on ``grid`` (its own grid, or
        the fitted one when predicting), or an array checked by scikit-learn's ``validate_data`` (dtype,
        sparse, complex, shape and n_features_in_ messages as scikit-learn's), on ``grid`` (default: G
        equispaced points on [0, 1]).  Curves need at least 3 grid points."""
        from sklearn.utils.validation import check_consistent_length, column_or_1d, validate_data

        from fdp_flower.api import InputError
        from fdp_flower.functional.validation import DataValidationError, fdata_values, is_fdatabasis, is_fdatagrid

        if is_fdatagrid(X) or is_fdatabasis(X):
            grid = self.grid if fitting else self.grid_
            try:
                values, grid = fdata_values(X, None if grid is None else np.asarray(grid, dtype=float), "X")
            except DataValidationError as exc:
                raise InputError(str(exc)) from None
            if fitting:
                if y is None:
                    raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
                y = column_or_1d(y, warn=True).astype(float)
                check_consistent_length(values, y)
                self.n_features_in_ = int(values.shape[1])
            return values, y, grid
        if fitting:
            values, y = validate_data(self, X, y, ensure_min_features=3, ensure_min_samples=2, y_numeric=True)
            grid = (np.linspace(0.0, 1.0, values.shape[1]) if self.grid is None
                    else np.asarray(self.grid, dtype=float))
            return values, np.asarray(y, dtype=float), grid
        values = validate_data(self, X, reset=False)
        return values, None, self.grid_

    def _check_parameters(self) -> float | None:
        from fdp_flower.api import InputError

        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float, np.integer, np.floating)) \
                or not np.isfinite(self.alpha) or self.alpha < 0:
            raise InputError(f"alpha: expected a finite number >= 0, got {self.alpha!r}")
        if not isinstance(self.n_clients, (int, np.integer)) or isinstance(self.n_clients, bool) or self.n_clients < 1:
            raise InputError(f"n_clients: expected a positive integer, got {self.n_clients!r}")
        share = self.inference_share
        if share is not None and not (isinstance(share, (int, float)) and 0 < share < 1):
            raise InputError(f"inference_share: expected a number in (0, 1) or None, got {share!r}")
        if not (isinstance(self.confidence_level, (int, float)) and 0 < self.confidence_level < 1):
            raise InputError(f"confidence_level: expected a number in (0, 1), got {self.confidence_level!r}")
        if self.eps is not None and share is not None:
            from fdp_flower.api import check_run_arguments
            from fdp_flower.inference.releases import fit_budget

            check_run_arguments(eps=self.eps, seed=self.random_state, out=None)
            return fit_budget(float(self.eps), float(self.delta), float(share))
        return self.eps

    def fit(self, X, y, client_ids=None):
        """Fit on curves ``X`` (FDataGrid, FDataBasis or (n, G) array) and responses ``y`` (n,); ``client_ids``:
        the site of every row (default: ``n_clients`` seeded near-equal parts).  Returns self."""
        import fdp_flower

        eps_fit = self._check_parameters()
        values, response, grid = self._validated(X, y, fitting=True)
        n_clients = None if client_ids is not None else int(self.n_clients)
        label = f"FDPQuantileRegressor(quantile={self.quantile}, alpha={self.alpha:g}, eps={self.eps})"
        if self.accountant is not None:
            # in total mode the fit (and its inference releases) compose to exactly (eps, delta): one Gaussian
            from fdp_flower.privacy.calibration import target_mu

            noise_key = None if self.noise_source == "os_entropy" else ("seeded", int(self.random_state))
            self.accountant.check(label, None if self.eps is None
                                  else [1.0 / target_mu(float(self.eps), float(self.delta))], noise_key)
        model = fdp_flower.fit(
            values, response, grid=grid, tau=self.quantile, eps=eps_fit, delta=self.delta, n_clients=n_clients,
            client_ids=client_ids, penalty=self.penalty if self.alpha > 0 else "none",
            lam=float(self.alpha) * (n_clients if n_clients is not None else len(np.unique(client_ids))),
            rounds=self.rounds, basis=self.basis, n_components=self.n_components, clip=self.clip,
            clip_shape=self.clip_shape, intercept=self.fit_intercept, intercept_share=self.intercept_share,
            response_offset=self.response_offset, response_scale=self.response_scale, rho=self.rho, step=self.step,
            estimator=self.estimator,
            basis_eps=self.basis_eps, basis_delta=self.basis_delta, seed=self.random_state,
            noise_source=self.noise_source, reference=False, name="FDPQuantileRegressor",
            # with inference: the ADMM rule in the response's units, whose bands were measured at 200 repetitions per
            # cell (docs/inference.md section 4; a level-calibrated fit's band, section 6, at fewer; the Newton
            # rule's releases have no band)
            level_calibration=False if self.inference_share is not None else None,
            rule="admm" if self.inference_share is not None and self.eps is not None else None)
        several = not np.isscalar(self.quantile)
        if self.inference_share is not None:
            from fdp_flower.inference.inprocess import run_inference

            if several:  # every level's inference meets that level's share of the total (mu / sqrt(Q))
                from fdp_flower.api import client_partition
                from fdp_flower.outputs.quantiles import quantile_models
                from fdp_flower.privacy.calibration import analytic_gaussian_epsilon, target_mu

                parts, _ = client_partition(len(response), n_clients=n_clients, client_ids=client_ids,
                                            seed=self.random_state)
                sites = np.empty(len(response), dtype=int)
                for i, rows in enumerate(parts):
                    sites[rows] = i
                level_total = None if self.eps is None else analytic_gaussian_epsilon(
                    target_mu(float(self.eps), float(self.delta)) / np.sqrt(len(model)), float(self.delta))
                inferred = [m.with_inference(run_inference(m, _site_parts(values, response, m, sites),
                                                           eps_total=level_total)) for m in model.models]
                model = quantile_models(model.taus, inferred, delta=float(self.delta), mode=model.privacy.mode,
                                        eps_budget=model.privacy.eps_budget if self.eps is None else float(self.eps),
                                        noncrossing=model.noncrossing)
            else:
                record = run_inference(model, _site_parts(values, response, model, client_ids),
                                       eps_total=None if self.eps is None else float(self.eps))
                model = model.with_inference(record)
        if self.accountant is not None:
            self.accountant.charge(label, model.ledger, noise_key)
        self.model_ = model
        self.grid_ = model.grid
        self.privacy_ = model.privacy
        models = model.models if several else (model,)
        if several:
            from skfda import FDataGrid

            self.coef_ = FDataGrid(model.beta_hats, grid_points=model.grid)
            self.intercept_ = model.intercepts
        else:
            self.coef_ = model.beta_hat
            self.intercept_ = float(model.intercept)
        bands = []
        for m in models:
            band = None
            if m.inference is not None:
                from fdp_flower.inference.bands import InferenceError

                try:
                    band = m.confidence_band(self.confidence_level)
                except InferenceError as exc:  # the fit stands; the releases just cannot support a band
                    import warnings

                    warnings.warn(f"FDPQuantileRegressor: no confidence band: {exc}", stacklevel=2)
            bands.append(band)
        self.band_ = bands if several else bands[0]
        return self

    def predict(self, X) -> np.ndarray:
        """The fitted quantile for every curve of ``X`` (FDataGrid, FDataBasis, or an array on ``grid_``)."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "model_")
        values, _, _ = self._validated(X, fitting=False)
        return self.model_.predict(values)

    def score(self, X, y, sample_weight=None) -> float:
        """D^2 pinball score: 1 - sum pinball(y, predict(X)) / sum pinball(y, the empirical quantile of y)
        (``sklearn.metrics.d2_pinball_score`` at alpha = ``quantile``); 1 is perfect, 0 is no better than a
        constant, the quantile-regression analogue of R^2 (Koenker & Machado 1999)."""
        from sklearn.metrics import d2_pinball_score

        y = np.asarray(y, dtype=float).ravel()
        predictions = self.predict(X)
        if np.isscalar(self.quantile):
            return float(d2_pinball_score(y, predictions, sample_weight=sample_weight, alpha=self.quantile))
        return float(np.mean([d2_pinball_score(y, predictions[:, q], sample_weight=sample_weight, alpha=tau)
                              for q, tau in enumerate(self.model_.taus)]))

    def summary(self, points=None):
        """The fitted model's summary (``model_.summary``) at ``confidence_level``."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "model_")
        if np.isscalar(self.quantile):
            return self.model_.summary(points=points, level=self.confidence_level)
        return "\n\n".join(str(m.summary(points=points, level=self.confidence_level)) for m in self.model_.models)


# ---------------------------------------------------------------- choosing lam from an accountant's budget
#: The ledger mechanism of a cross-validation fold's noisy mean validation loss
VALIDATION_MECHANISM = "cv_validation_loss"


class LamSelection:
    """What :func:`select_lam` chose and spent.

    Attributes
    ----------
    lam : the chosen penalty weight (smallest noisy mean validation loss)
    lams : the candidates
    losses : (len(lams),) the noisy mean validation check loss of every candidate, over the folds
    fits : the number of private fits (len(lams) x cv), each with one noisy validation loss
    eps_selection : eps (PLD, at the accountant's delta) of the selection's own releases, composed
    eps_spent : the accountant's composed eps after the selection (every fit it saw before too)
    eps_total : the accountant's total
    """

    def __init__(self, lam, lams, losses, fits, eps_selection, eps_spent, eps_total, cv):
        self.lam, self.lams, self.losses = float(lam), tuple(float(v) for v in lams), np.asarray(losses, dtype=float)
        self.fits, self.eps_selection, self.eps_spent, self.eps_total, self.cv = (
            int(fits), float(eps_selection), float(eps_spent), float(eps_total), int(cv))

    def __str__(self) -> str:
        table = ", ".join(f"{lam:g}: {loss:.4g}" for lam, loss in zip(self.lams, self.losses))
        return (f"select_lam: lam = {self.lam:g} (noisy mean validation check loss per lam: {table}); spent "
                f"{self.fits} private fits ({len(self.lams)} lams x {self.cv} folds) and {self.fits} noisy validation "
                f"losses: eps = {self.eps_selection:.4g} for the selection alone (PLD); the accountant has now spent "
                f"eps = {self.eps_spent:.4g} of {self.eps_total:g}")

    __repr__ = __str__


def select_lam(curves, y, lams, *, accountant, eps_per_fit: float, loss_clip: float, cv: int = 5, tau: float = 0.5,
               score_share: float = 0.1, seed: int = 0, grid=None, **fit_kwargs) -> LamSelection:
    """Choose ``lam`` by private ``cv``-fold cross-validation, spending from ``accountant``.

    For every candidate and fold: a private fit on the other folds (:func:`fdp_flower.fit`, charged to the
    accountant) and one Gaussian release of the held-out rows' mean check loss, each row's loss clipped at
    ``loss_clip`` (replace-one sensitivity ``loss_clip / m_held_out``), also charged.  The fit gets
    ``1 - score_share`` and the validation loss ``score_share`` of the Gaussian mu of ``eps_per_fit``, so each pair
    spends eps_per_fit.  The chosen lam minimizes the noisy mean loss over the folds: post-processing of charged
    releases (scikit-learn's ``GridSearchCV`` instead scores the held-out rows without noise: its choice of lam is
    not covered by the ledger).  The whole cost (len(lams) x cv pairs) is checked against the accountant before
    the first fit; a refusal spends nothing.

    Parameters
    ----------
    curves, y, grid : the data (as :func:`fdp_flower.fit`)
    lams : sequence of float
        Candidate penalty weights (``lam`` of :func:`fdp_flower.fit`).
    accountant : PrivacyAccountant
        The data set's budget.
    eps_per_fit : float
        The eps of one fit with its validation loss (at the accountant's delta).
    loss_clip : float
        The public bound on one row's check loss in the validation release (y's units).
    cv : int
        The number of folds (default: 5).
    tau, seed, **fit_kwargs :
        As in :func:`fdp_flower.fit` (``eps``, ``delta``, ``accountant`` and ``client_ids`` are set here; the folds and
        every fit's noise are seeded from ``seed``).
    """
    import fdp_flower
    from fdp_flower.api import InputError, curve_inputs, noise_seed
    from fdp_flower.inference.releases import fit_budget
    from fdp_flower.privacy.calibration import target_mu
    from fdp_flower.privacy.ledger import GaussianRelease, pld_epsilon
    from fdp_flower.privacy.mechanisms import release_rng

    if accountant is None:
        raise InputError("accountant: select_lam spends from a PrivacyAccountant (fdp_flower.PrivacyAccountant)")
    lams = [float(v) for v in np.atleast_1d(np.asarray(lams, dtype=float))]
    if not lams or not all(np.isfinite(v) and v >= 0 for v in lams):
        raise InputError(f"lams: expected finite candidates >= 0, got {lams!r}")
    if isinstance(cv, bool) or not isinstance(cv, (int, np.integer)) or cv < 2:
        raise InputError(f"cv: expected an integer >= 2, got {cv!r}")
    if not (isinstance(loss_clip, (int, float)) and np.isfinite(loss_clip) and loss_clip > 0):
        raise InputError(f"loss_clip: expected a finite number > 0, got {loss_clip!r}")
    if not (isinstance(score_share, (int, float)) and 0 < score_share < 1):
        raise InputError(f"score_share: expected a number in (0, 1), got {score_share!r}")
    for key in ("eps", "delta", "accountant"):
        if key in fit_kwargs:
            raise InputError(f"{key}: set by select_lam (eps_per_fit, the accountant's delta, accountant)")
    for key in ("client_ids", "client_column", "out"):
        if key in fit_kwargs:
            raise InputError(f"{key}: not supported by select_lam (its folds split the rows; every fit's sites are "
                             "the fold's rows split by n_clients)")
    if not np.isscalar(tau):
        raise InputError(f"tau: select_lam chooses lam for one quantile level, got {tau!r}")
    values, response, grid, _ = curve_inputs(curves, y, grid=grid)
    n = len(response)
    if n < 2 * cv:
        raise InputError(f"cv: {cv} folds need at least {2 * cv} rows, got {n}")
    delta = accountant.delta
    mu = target_mu(float(eps_per_fit), delta)
    pairs = len(lams) * cv
    label = f"select_lam({len(lams)} lams x {cv} folds, eps_per_fit={eps_per_fit:g})"
    accountant.check(label, [1.0 / (np.sqrt(pairs) * mu)])
    folds = np.array_split(np.random.default_rng(seed).permutation(n), cv)
    eps_fit = fit_budget(float(eps_per_fit), delta, float(score_share))
    z_score = 1.0 / (np.sqrt(score_share) * mu)
    noise_source = fit_kwargs.get("noise_source", "seeded")
    own: list = []
    losses = np.zeros((len(lams), cv))
    for a, lam in enumerate(lams):
        for k, held in enumerate(folds):
            train = np.setdiff1d(np.arange(n), held)
            index = a * cv + k
            model = fdp_flower.fit(values[train], response[train], grid=grid, tau=tau, lam=lam, eps=eps_fit,
                                   delta=delta, seed=noise_seed(seed, index), accountant=accountant,
                                   name=f"select_lam-fold-{k + 1}-of-{cv}", **{"reference": False, **fit_kwargs})
            residual = response[held] - model.predict(values[held])
            loss = np.minimum(residual * (tau - (residual < 0)), float(loss_clip))
            sensitivity = float(loss_clip) / held.size
            release = GaussianRelease(0, 1, sensitivity, z_score * sensitivity, mechanism=VALIDATION_MECHANISM)
            rng = release_rng(noise_seed(seed, pairs + index), 0, 1, noise_source)
            losses[a, k] = float(loss.mean() + release.sigma * rng.standard_normal())
            accountant.charge(f"validation loss (lam={lam:g}, fold {k + 1}/{cv})", [release])
            worst = [r for r in model.ledger.releases if r.client == model.privacy.worst_client]
            own += worst + [release]
    mean_losses = losses.mean(axis=1)
    eps_selection = pld_epsilon(own, delta)
    return LamSelection(lams[int(np.argmin(mean_losses))], lams, mean_losses, pairs, eps_selection, accountant.spent,
                        accountant.eps_total, cv)
