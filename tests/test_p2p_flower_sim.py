"""End to end on Flower's simulation runtime: the relay and the in-process engine agree bit for bit."""
import numpy as np
import pytest

from fdp_flower.algorithms.p2p.config import P2PScenario, PAdmmConfig, SyntheticRegressionData, ZcdpNflConfig
from fdp_flower.config.sections import PrivacyConfig
from fdp_flower.engines.p2p import run_scenario

SCENARIOS = {
    "zcdp_nfl": P2PScenario(federation={"num_clients": 4}, topology={"kind": "ring"},
                            data=SyntheticRegressionData(problem="lad", samples_per_node=20, dim=3),
                            algorithm=ZcdpNflConfig(rounds=3),
                            privacy=PrivacyConfig(mode="total", eps=5.0, delta=1.0e-4)),
    "p_admm": P2PScenario(federation={"num_clients": 4}, topology={"kind": "ring"},
                          data=SyntheticRegressionData(problem="ridge", samples_per_node=20, dim=3),
                          algorithm=PAdmmConfig(rounds=3, decay={"kind": "periodic", "decay": 0.9, "period": 2}),
                          privacy=PrivacyConfig(mode="total", eps=5.0, delta=1.0e-4)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_flower_simulation_relay_matches_engine(name):
    SCENARIO = SCENARIOS[name]
    from flwr.app import Context, Message
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    from fdp_flower.clients.p2p import handle_p2p_train
    from fdp_flower.strategies.relay import run_relay

    out = []
    server = ServerApp()

    @server.main()
    def _main(grid: Grid, context: Context) -> None:
        out.append(run_relay(grid, SCENARIO, evaluate=False))

    client = ClientApp()

    @client.train()
    def _train(msg: Message, context: Context) -> Message:
        return handle_p2p_train(msg, context, SCENARIO)

    run_simulation(server_app=server, client_app=client, num_supernodes=2,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    assert out, "the ServerApp did not finish"
    engine = run_scenario(SCENARIO)
    np.testing.assert_array_equal(np.stack(out[0].released_history), engine.released)
    assert out[0].ledger.to_rows() == engine.ledger.to_rows()
