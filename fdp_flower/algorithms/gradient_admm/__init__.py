"""DP-ADMM and DP-AccADMM by gradient perturbation (Xu et al. 2020), federated form.

``config.py`` its scenario schema, ``plan.py`` data, A, problem and calibration from a scenario, ``site.py``
the site function, ``protocol.py`` the server protocol, ``update.py`` the update rules and Theorem 1,
``setup.py`` a simulated federation's evaluation, ``nodes.py`` the server's public facts on node files (m_i, d,
A), ``reference.py`` the exact estimator.
"""
from fdp_flower.algorithms.registry import Family

FAMILY = Family(
    name="gradient_admm",
    kinds=("dp_admm", "dp_acc_admm"),
    schema="fdp_flower.algorithms.gradient_admm.config:GradientADMMScenario",
    run_config={"num-server-rounds": "algorithm.rounds", "eps": "privacy.eps", "delta": "privacy.delta",
                "lam": "model.penalty.lam", "seed": "seed", "num-clients": "federation.num_clients"},
    run_inprocess="fdp_flower.cli.run:run_gradient_admm_inprocess",
    server_app="fdp_flower.strategies.gradient_admm:run_gradient_admm_server",
    client_train="fdp_flower.clients.gradient_admm:handle_gradient_admm_train",
    read_results="fdp_flower.outputs.models:read_gradient_admm_results",
    plots="fdp_flower.outputs.plots:gradient_admm_results_figure",
    audit="fdp_flower.engines.audit:GradientADMMProtocol",
    # the ClientApp's answer to the setup query of a run on node files (m_i, d, the site's totals)
    extra={"client_query": "fdp_flower.clients.gradient_admm:handle_gradient_admm_setup_query"},
)
