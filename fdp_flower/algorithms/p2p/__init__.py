"""Peer-to-peer families: zCDP-NFL, DP-NFL, zCDP-grad-NFL, decentralized ADMM (Gauthier et al. 2023),
PR-ADMM (Ding et al. 2019) and P-ADMM, emulated on Flower by a relay (docs/p2p.md).

``config.py`` its scenario schema, ``plan.py`` the graph, problem and resolved algorithm of a scenario,
``site.py`` the site function (a node's noisy data term), ``protocol.py`` the relay's server protocol,
``zcdp_nfl.py``, ``grad_nfl.py``, ``p_admm.py``, ``pr_admm.py`` the update rules, ``budget.py`` the noise
plans, ``topology.py`` the graphs, ``problems.py`` the data and the centralized references, ``nodes.py`` the
relay's protocol on node files (from the nodes' m_i and d).
"""
from fdp_flower.algorithms.registry import Family

FAMILY = Family(
    name="p2p",
    kinds=("zcdp_nfl", "dp_nfl", "zcdp_grad_nfl", "decentralized_admm", "pr_admm", "p_admm"),
    schema="fdp_flower.algorithms.p2p.config:P2PScenario",
    run_config={"num-server-rounds": "algorithm.rounds", "eps": "privacy.eps", "delta": "privacy.delta",
                "lam": "model.penalty.lam", "seed": "seed", "num-clients": "federation.num_clients"},
    run_inprocess="fdp_flower.cli.run:run_p2p_inprocess",
    server_app="fdp_flower.strategies.relay:run_p2p_federation",
    client_train="fdp_flower.clients.p2p:handle_p2p_train",
    read_results="fdp_flower.outputs.models:read_p2p_results",
    plots="fdp_flower.outputs.plots:p2p_results_figure",
    audit="fdp_flower.engines.audit:P2PProtocol",
    party="node",
    clients_field="federation.num_clients",
    # the ClientApp's answer to the setup query of a run on node files (m_i, d, the site's totals)
    extra={"client_query": "fdp_flower.clients.p2p:handle_p2p_setup_query"},
)
