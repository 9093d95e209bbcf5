"""Site side of a secure sum (docs/secure_aggregation.md): the reply that carries one integer share
through Flower's ``secaggplus_mod``, and the site's own checks of the protocol the server runs.

Use on a ClientApp, guard first::

    @app.train(mods=[secure_sum_guard(policy_of), secaggplus_mod])
    def train(msg, context):
        share = ...  # fdp_flower.privacy.distributed.site_share(...)
        return share_reply(msg, share, policy_of(context).grid)

``secaggplus_mod`` answers the SecAgg+ key stages itself and calls the handler only at the
masked-vector stage; it masks the reply's arrays and lets its config and metric records through in
clear.  :func:`share_reply` therefore puts nothing there that depends on data (empty metrics,
num_examples = 1).  The guard (:func:`secure_sum_guard`) refuses, with nothing released:

- at the masked-vector stage, before the handler runs, a protocol other than the one the site's
  share is planned for (:func:`check_secaggplus_setup`): Flower's quantization (so that the share
  passes exactly and is never clipped), the number of sampled nodes M, a key-sharing graph that is
  not complete (then a site could not see how many shares are in the sum), and a Shamir threshold
  outside (t, M - t];
- at the unmask stage, sending its unmasking shares when fewer than M - t nodes contributed masked
  vectors (the noise of the missing shares would be short, eq. (9.4)).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from fdp_flower.privacy.distributed import FlowerGrid
from fdp_flower.wire.flwr import Context, Message
from fdp_flower.wire.flwr_secagg import (
    RECORD_KEY_CONFIGS,
    RECORD_KEY_STATE,
    Code,
    FitRes,
    Key,
    Stage,
    Status,
    ndarrays_to_parameters,
)
from fdp_flower.wire.flwr_secagg import recorddict_compat as compat


class SecureSumSiteRefusal(RuntimeError):
    """The site refuses to take part in this secure sum (nothing of its data is released)."""


@dataclass(frozen=True)
class SiteSecureSumPolicy:
    """What a site accepts for a secure sum.

    Parameters
    ----------
    grid : FlowerGrid
        The quantization its share is encoded for (default: ``FlowerGrid()``).
    sites : int
        M, the number of nodes the round must sample.
    min_contributors : int
        M - t: the fewest masked vectors the sum may contain (its noise share is V / (M - t)).
    """

    sites: int
    min_contributors: int
    grid: FlowerGrid = FlowerGrid()

    def __post_init__(self):
        if not (isinstance(self.sites, int) and self.sites >= 2):
            raise ValueError(f"sites must be an integer >= 2, got {self.sites!r}")
        if not (isinstance(self.min_contributors, int) and 2 <= self.min_contributors <= self.sites):
            raise ValueError(f"min_contributors must be an integer in [2, sites], got {self.min_contributors!r}")

    @property
    def tolerated(self) -> int:
        return self.sites - self.min_contributors


def check_secaggplus_setup(state: Mapping[str, object], policy: SiteSecureSumPolicy) -> None:
    """Refuse (:class:`SecureSumSiteRefusal`) a SecAgg+ setup other than the planned one; ``state`` is
    the node's ``secaggplus_state`` record as ``secaggplus_mod`` saved it after the setup stage."""
    g = policy.grid
    expected = {"clipping_range": g.clipping_range, "target_range": g.quantization_range,
                "mod_range": g.modulus_range, "max_weight": g.max_weight, "sample_num": policy.sites}
    for key, value in expected.items():
        got = state.get(key)
        if got != value:
            raise SecureSumSiteRefusal(f"secure sum refused: the server set {key} = {got!r}, this site's plan "
                                       f"needs {value!r}")
    share_num, threshold = state.get("share_num"), state.get("threshold")
    if not (isinstance(share_num, int) and share_num >= policy.sites):
        raise SecureSumSiteRefusal(f"secure sum refused: keys shared with {share_num!r} nodes, not all {policy.sites} "
                                   f"(the site could not count the contributors)")
    if not (isinstance(threshold, int) and policy.tolerated < threshold <= policy.min_contributors):
        raise SecureSumSiteRefusal(f"secure sum refused: Shamir threshold {threshold!r} outside "
                                   f"(t, M - t] = ({policy.tolerated}, {policy.min_contributors}]")


def share_reply(msg: Message, share: np.ndarray, grid: FlowerGrid) -> Message:
    """The masked-vector stage's reply: ``share`` encoded for Flower's grid (eq. (9.5)) as the only
    array, num_examples = 1 and empty metrics (these two travel in clear)."""
    res = FitRes(status=Status(Code.OK, ""), parameters=ndarrays_to_parameters([grid.encode(share)]),
                 num_examples=grid.num_examples, metrics={})
    return Message(compat.fitres_to_recorddict(res, keep_input=False), reply_to=msg)


def secure_sum_guard(policy_of: Callable[[Context], SiteSecureSumPolicy]):
    """A ClientApp mod, placed before ``secaggplus_mod``, that enforces ``policy_of(context)`` (see the
    module docstring); other messages pass through."""

    def guard(msg: Message, context: Context, call_next):
        configs = msg.content.config_records.get(RECORD_KEY_CONFIGS) if msg.has_content() else None
        if configs is None:
            return call_next(msg, context)
        stage = configs.get(Key.STAGE)
        if stage == Stage.COLLECT_MASKED_VECTORS:
            state = context.state.config_records.get(RECORD_KEY_STATE)
            check_secaggplus_setup(state if state is not None else {}, policy_of(context))
        elif stage == Stage.UNMASK:
            policy = policy_of(context)
            active = configs.get(Key.ACTIVE_NODE_ID_LIST) or []
            if len(active) < policy.min_contributors:
                raise SecureSumSiteRefusal(f"secure sum refused at unmasking: {len(active)} nodes contributed, the "
                                           f"site's share needs {policy.min_contributors}")
        return call_next(msg, context)

    return guard
