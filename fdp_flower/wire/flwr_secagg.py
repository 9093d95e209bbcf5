"""The client side of Flower's legacy API that SecAgg+ needs (``secaggplus_mod`` speaks the legacy ``FitIns`` /
``FitRes`` records): imported once, with Flower's deprecation warnings filtered, as :mod:`fdp_flower.wire.flwr`
does for the Message API.  Only the secure-aggregation client modules import it."""
from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, RECORD_KEY_STATE, Key, Stage
    from flwr.compat.common import recorddict_compat

__all__ = ["Code", "FitRes", "Key", "RECORD_KEY_CONFIGS", "RECORD_KEY_STATE", "Stage", "Status",
           "ndarrays_to_parameters", "parameters_to_ndarrays", "recorddict_compat"]
