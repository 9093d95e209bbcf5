"""The server side of Flower's legacy API that ``SecAggPlusWorkflow`` needs (in flwr 1.41 / 1.42 it runs only
through a ``LegacyContext`` and a legacy ``Strategy``): imported once, with Flower's deprecation warnings
filtered.  Only :mod:`fdp_flower.strategies.secure_sum` imports it."""
from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from flwr.common import FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server import LegacyContext, ServerConfig
    from flwr.server.client_manager import ClientManager, SimpleClientManager
    from flwr.server.client_proxy import ClientProxy
    from flwr.server.compat.grid_client_proxy import GridClientProxy
    from flwr.server.strategy import Strategy as LegacyStrategy
    from flwr.server.workflow import SecAggPlusWorkflow
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
    from flwr.server.workflow.constant import Key as WorkflowKey

__all__ = ["ClientManager", "ClientProxy", "FitIns", "FitRes", "GridClientProxy", "LegacyContext", "LegacyStrategy",
           "MAIN_CONFIGS_RECORD", "MAIN_PARAMS_RECORD", "Parameters", "Scalar", "SecAggPlusWorkflow", "ServerConfig",
           "SimpleClientManager", "WorkflowKey", "ndarrays_to_parameters", "parameters_to_ndarrays"]
