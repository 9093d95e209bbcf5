"""Flower's server-side names (``Grid``, ``ServerApp``, ``Strategy``), imported once with the warning
filter of :mod:`fdp_flower.wire.flwr`; only the server side (strategies, the ServerApp) imports this."""
from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import Strategy

__all__ = ["Grid", "ServerApp", "Strategy"]
