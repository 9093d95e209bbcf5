"""Client-side row clipping of features to the public bound c1 (spec section 0)."""
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
