"""Client-side row clipping of features to the public bound c1 (docs/algorithms.md, section 0)."""
from __future__ import annotations

import numpy as np


def clip_rows(features: np.ndarray, c1: float) -> tuple[np.ndarray, int]:
    """Rescale every row a_j with ||a_j||_2 > c1 onto the sphere of radius c1.

    Returns the clipped copy (the input is not modified) and the number of
    rows that were clipped.  Without this bound the DP guarantee is void.
    """
    if not np.isfinite(c1) or c1 <= 0:
        raise ValueError(f"clipping bound c1 must be a positive finite number, got {c1}")
    features = np.asarray(features, dtype=float)
    if features.ndim < 2:
        raise ValueError(f"features must have shape (..., m, K), got shape {features.shape}")
    norms = np.linalg.norm(features, axis=-1, keepdims=True)
    scale = np.minimum(1.0, c1 / np.maximum(norms, np.finfo(float).tiny))
    n_clipped = int(np.count_nonzero(norms[..., 0] > c1))
    return features * scale, n_clipped


def clip_rows_ellipsoid(features: np.ndarray, scales: np.ndarray) -> tuple[np.ndarray, int]:
    """Rescale every row with ||a_j / s||_2 > 1 onto the ellipsoid sum_k a_jk^2 / s_k^2 = 1.

    ``scales`` s (K,) > 0 are public (e.g. c1 sqrt(lambda_k) of an FPCA basis).  The rows of
    the result satisfy ||a / s|| <= 1, so a per-sample gradient -a psi with |psi| <= G1 has
    ||(grad) / s|| <= G1: the Mahalanobis sensitivity that :func:`fdp_flower.privacy.mechanisms.add_gaussian_noise`
    with the same ``scales`` calibrates to.  Returns the clipped copy and the number of rows clipped.
    """
    scales = np.asarray(scales, dtype=float)
    features = np.asarray(features, dtype=float)
    if features.ndim < 2:
        raise ValueError(f"features must have shape (..., m, K), got shape {features.shape}")
    if scales.shape != features.shape[-1:] or not np.all(np.isfinite(scales)) or np.any(scales <= 0):
        raise ValueError(f"ellipsoid scales must be {features.shape[-1]} positive finite numbers")
    norms = np.linalg.norm(features / scales, axis=-1, keepdims=True)
    factor = np.minimum(1.0, 1.0 / np.maximum(norms, np.finfo(float).tiny))
    return features * factor, int(np.count_nonzero(norms[..., 0] > 1.0))


def intercept_design(features: np.ndarray, c1: float, share: float,
                     scales: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Rows (c0, a_j) with a public intercept column c0 = share c1, every row still inside the clip set.

    The intercept is the coefficient of a constant feature.  The constant is public and the same
    for every record, so it is appended on the client and the remaining room is left to the data:

    - sphere (``scales`` None): a_j is clipped to ||a_j|| <= c1 sqrt(1 - share^2), so
      ||(c0, a_j)||^2 <= c0^2 + c1^2 (1 - share^2) = c1^2;
    - ellipsoid (``scales`` s (K,), the noise shape of the scores): a_j is clipped to
      ||a_j / s|| <= sqrt(1 - share^2) and the intercept coordinate has scale c1, so
      ||(c0, a_j) / (c1, s)||^2 <= share^2 + 1 - share^2 = 1.

    Either way every row satisfies the bound the per-sample gradient bound G and hence every
    sensitivity of the run were computed for (||row|| <= c1, resp. ||row / (c1, s)|| <= 1):
    appending the column changes neither G nor the noise multiplier, only the dimension
    (K + 1).  Returns the (m, K + 1) rows and the number of score rows clipped.
    """
    if not 0 < share < 1:
        raise ValueError(f"the intercept share must be in (0, 1), got {share}")
    room = float(np.sqrt(1.0 - share * share))
    if scales is None:
        clipped, count = clip_rows(features, c1 * room)
    else:
        clipped, count = clip_rows_ellipsoid(features, np.asarray(scales, dtype=float) * room)
    column = np.full(clipped.shape[:-1] + (1,), share * c1)
    return np.concatenate([column, clipped], axis=-1), count
