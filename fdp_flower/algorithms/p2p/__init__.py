"""Peer-to-peer families: zCDP-NFL, DP-NFL, zCDP-grad-NFL, decentralized ADMM (Gauthier et al. 2023),
PR-ADMM (Ding et al. 2019) and P-ADMM, emulated on Flower by a relay."""
from fdp_flower.algorithms.registry import Family

FAMILY = Family(
    name="p2p",
    kinds=("zcdp_nfl", "dp_nfl", "zcdp_grad_nfl", "decentralized_admm", "pr_admm", "p_admm"),
    schema="fdp_flower.algorithms.p2p.config:P2PScenario",
    run_config={"num-server-rounds": "algorithm.steps", "eps": "privacy.eps", "delta": "privacy.delta",
                "lam": "data.lam", "seed": "seed", "num-clients": "topology.num_nodes"},
    run_inprocess="fdp_flower.cli.run:run_p2p_inprocess",
    server_app="fdp_flower.strategies.relay:run_p2p_federation",
    client_train="fdp_flower.clients.p2p:handle_p2p_train",
    read_results="fdp_flower.outputs.models:read_p2p_results",
    plots="fdp_flower.outputs.plots:p2p_results_figure",
    audit="fdp_flower.engines.audit:P2PProtocol",
    party="node",
    clients_field="topology.num_nodes",
)
