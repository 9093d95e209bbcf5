"""Private inference for FDP-ADMM fits: confidence bands for beta(t) and an interval for the intercept.

Two parts, both pure numpy (docs/inference.md):

- :mod:`fdp_flower.inference.releases`: what each site releases after a fit, at the released
  estimate the server names (a noisy residual histogram and a noisy Gram matrix of its clipped
  feature rows), their sensitivities, ledger events and budget split;
- :mod:`fdp_flower.inference.bands`: what the server computes from those releases and the fit's
  public noise plan: the sandwich covariance of the estimator, the covariance the privacy noise
  adds through the server's recursion, and the pointwise and simultaneous bands.

:mod:`fdp_flower.inference.inprocess` runs the site releases on simulated clients (the Python API).
"""
