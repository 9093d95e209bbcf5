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
"""
__version__ = "0.1.0"
