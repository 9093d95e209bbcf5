"""fdp-flower: differentially private federated ADMM for (functional) quantile regression.

Layers, lowest first (docs/architecture.md; ``tests/test_architecture.py`` keeps the direction):

- ``config``, ``core``: shared scenario-schema pieces; losses, penalties, clipping, step schedules;
- ``privacy``: the Gaussian mechanism, ledger, accountants, calibration, budget guard;
- ``functional``, ``data``: bases, FPCA, simulated designs, node files; tabular data sets;
- ``algorithms``: one folder per family (math, config schema, exact reference) and the registry;
- ``outputs``: results directories, checkpoints, plots, reports;
- ``engines``: in-process, batched and peer-to-peer engines, sweeps, local Flower launchers;
  ``wire``: the Flower message format shared by both sides;
- ``clients``, ``strategies``: the Flower adapters (client workers, server strategies);
- entry points: ``cli``, ``server_app``, ``client_app``.

Only ``wire``, ``clients``, ``strategies``, ``server_app`` and ``client_app`` import ``flwr``.

The Python API (:mod:`fdp_flower.api`, docs/api.md) is re-exported here lazily, so that
``import fdp_flower`` loads nothing else: :func:`fit` (FDP-ADMM on curves), :func:`fit_p2p`,
:func:`fit_gradient` (tabular arrays), :func:`load` (a saved model or a results directory) and
:func:`load_results` (a results directory); from :mod:`fdp_flower.estimator`, the scikit-learn
estimator :class:`FDPQuantileRegressor` and :func:`infer` (private inference on a fit); from
:mod:`fdp_flower.privacy.accountant`, :class:`PrivacyAccountant` (a budget across fits) and
:class:`BudgetExceeded`, with :func:`select_lam` (``lam`` by private cross-validation from an accountant).
"""
__version__ = "0.1.0"

_API = ("fit", "fit_p2p", "fit_gradient", "load", "load_results", "FunctionalModel", "TabularModel", "PrivacyReport")
_ESTIMATOR = ("FDPQuantileRegressor", "infer", "select_lam")
_ACCOUNTANT = ("PrivacyAccountant", "BudgetExceeded")
__all__ = [*_API, *_ESTIMATOR, *_ACCOUNTANT, "__version__"]


def __getattr__(name: str):
    if name in _API:
        from fdp_flower import api

        return getattr(api, name)
    if name in _ESTIMATOR:
        from fdp_flower import estimator

        return getattr(estimator, name)
    if name in _ACCOUNTANT:  # through api: the package root imports only its re-exporting modules
        from fdp_flower import api

        return getattr(api, name)
    raise AttributeError(f"module 'fdp_flower' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_API) | set(_ESTIMATOR) | set(_ACCOUNTANT))
