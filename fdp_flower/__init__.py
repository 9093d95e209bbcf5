"""fdp-flower: differentially private federated ADMM for (functional) quantile regression.

The modules of this package are pure numpy math; only ``fdp_flower.strategies``,
``fdp_flower.clients``, ``fdp_flower.server_app`` and ``fdp_flower.client_app``
import ``flwr``.
"""
__version__ = "0.1.0"
