"""The one place fdp-flower imports Flower from (the Message API of flwr 1.41 / 1.42).

Flower's CLI dependency ``typer`` warns on import under some Python versions; the warning is
filtered here once instead of in every adapter.  Client-side modules import only the client-side
names; :func:`server_side` loads the server's (``Grid``, ``ServerApp``, ``Strategy``) when asked, so a
ClientApp process never imports Flower's server side.
"""
from __future__ import annotations

import warnings
from logging import ERROR, INFO, WARNING

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import (
        Array,
        ArrayRecord,
        ConfigRecord,
        Context,
        Error,
        Message,
        MessageType,
        MetricRecord,
        RecordDict,
    )
    from flwr.clientapp import ClientApp
    from flwr.common.constant import ErrorCode
    from flwr.common.logger import log

__all__ = ["ERROR", "INFO", "WARNING", "Array", "ArrayRecord", "ClientApp", "ConfigRecord", "Context", "Error", "ErrorCode", "Message", "MessageType",
           "MetricRecord", "RecordDict", "log"]
