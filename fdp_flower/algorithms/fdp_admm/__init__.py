"""FDP-ADMM / F-ADMM (Zhou & Xiang 2022): server-coordinated functional quantile regression.

``config.py`` its scenario schema, ``plan.py`` steps and noise from a scenario, ``site.py`` the site
function, ``protocol.py`` the server protocol, ``update.py`` the update rules, ``convergence.py`` the rho
and stopping rules, ``setup.py`` a simulated federation's data, ``reference.py`` the exact estimator.
"""
from fdp_flower.algorithms.registry import Family

FAMILY = Family(
    name="fdp_admm",
    kinds=("fdp_admm",),
    schema="fdp_flower.algorithms.fdp_admm.config:Scenario",
    run_config={"num-server-rounds": "algorithm.rounds", "eps": "privacy.eps", "delta": "privacy.delta",
                "tau": "model.loss.tau", "lam": "model.penalty.lam", "seed": "seed",
                "num-clients": "federation.num_clients"},
    run_inprocess="fdp_flower.cli.run:run_fdp_admm_inprocess",
    server_app="fdp_flower.strategies.fdp_admm:run_fdp_admm_federation",
    client_train="fdp_flower.clients.fdp_admm:handle_fdp_admm_train",
    read_results="fdp_flower.outputs.models:read_fdp_admm_results",
    plots="fdp_flower.outputs.plots:functional_results_figure",
    audit="fdp_flower.engines.audit:FDPADMMProtocol",
    extra={"resumable": True},
)
