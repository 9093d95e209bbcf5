"""The site's side of every release: its node-config policy, its noise and its on-disk ledger.

Every client worker gets its noise generators from :meth:`SiteSession.noise_for`, the one place
that decides, for each release, where the noise comes from and whether the site may release
at all:

- data that are **not node-local** (simulated from the run seed, public tabular sets; the
  server can compute them itself): the run's ``privacy.noise_source`` (``seeded`` by default,
  so every engine draws the same noise); no site ledger;
- **node-local** data (``data.kind: node_files`` with the file named by the node config's
  ``data-path``, a real deployment; :func:`names_own_data`): the site's own noise
  (its secret, else OS entropy; the run seed only with ``allow-seeded-noise=true``), its policy
  (``max-eps``, ``max-delta``, ``neighbouring``, ``allow-nonprivate``) and its ledger, charged
  and fsynced before the noise is drawn (:mod:`fdp_flower.privacy.site_ledger`).

A refusal is a :class:`~fdp_flower.privacy.site_policy.SiteRefusal`; the ClientApp turns it
into an error reply (:func:`refusal_reply`): nothing is released and the ledger is unchanged.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fdp_flower.privacy.ledger import GaussianRelease
from fdp_flower.privacy.mechanisms import release_rng
from fdp_flower.privacy.site_ledger import SiteLedger, SiteLedgerError
from fdp_flower.privacy.site_policy import (
    CLIPPED_ROWS_STREAM,
    SiteNoise,
    SitePolicy,
    SitePolicyError,
    SiteRefusal,
    SiteRelease,
    SiteTotals,
    check_node_config_keys,
    check_private,
    check_trust,
    clipped_rows_event,
    clipped_rows_release,
    site_epsilon,
)
from fdp_flower.wire.flwr import ConfigRecord, Context, Error, ErrorCode, Message

#: What a site refuses with (an error reply, nothing released).
SITE_ERRORS = (SiteRefusal, SitePolicyError, SiteLedgerError)
#: Name of the reply's ConfigRecord with the site's own totals.
SITE_RECORD = "site"


def names_own_data(context: Context, source=None) -> bool:
    """Whether the site's policy applies: the node config names the node's own file (``data-path``), as
    in a deployment -- whatever data kind the run's scenario names (a site's file is read only as data
    kind ``node_files``; any other kind is refused by its source, nothing released).  A node without a
    ``data-path`` (a simulation on one machine, data the server can compute or read) follows the run's
    noise source."""
    return context.node_config.get("data-path") not in (None, "")


#: The longest reason an error reply carries (a site's error never ships a file's content).
MAX_REASON = 300


def public_reason(exc: BaseException, context: Context | None = None) -> str:
    """The one line an error reply may carry about ``exc``: its message with the node's local paths --
    its data file and that file's directory, its ledger and FLWR_HOME directories, the user's home --
    replaced by placeholders, cut to :data:`MAX_REASON` characters.  The site keeps the whole message in
    its own log."""
    import os
    from pathlib import Path

    from fdp_flower.privacy.site_policy import flower_home

    text = " ".join(str(exc).split()) or type(exc).__name__
    config = {} if context is None else context.node_config
    places = []
    for key, label in (("data-path", "<data-path>"), ("ledger-dir", "<ledger-dir>"),
                       ("noise-secret-file", "<noise-secret-file>")):
        value = str(config.get(key) or "")
        if value:
            places += [(value, label), (str(Path(value).resolve()), label),
                       (str(Path(value).resolve().parent), f"<{key} directory>")]
    places += [(str(flower_home()), "<FLWR_HOME>"), (os.path.expanduser("~"), "<home>")]
    for value, label in sorted(places, key=lambda p: -len(p[0])):
        if len(value) > 1:
            text = text.replace(value, label)
    return text if len(text) <= MAX_REASON else text[:MAX_REASON - 3] + "..."


def scenario_digest(scenario) -> str:
    """``sha256:<hex>`` of the resolved scenario (recorded with each release: tells a resumed run,
    which has a new Flower run id but the same scenario, from a different run)."""
    text = json.dumps(scenario.model_dump(mode="json"), sort_keys=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@dataclass
class SiteSession:
    """The site as one message sees it (build with :meth:`open`)."""

    node_local: bool
    run_id: int
    run_seed: int
    requested_source: str
    scenario: str = ""
    policy: SitePolicy | None = None
    noise: SiteNoise | None = None
    ledger: SiteLedger | None = None
    totals: SiteTotals | None = field(default=None, init=False)

    @classmethod
    def open(cls, context: Context, scenario, *, node_local: bool) -> SiteSession:
        """The session of ``context`` (node config, run id) for a run of ``scenario``.

        ``node_local``: whether the release is computed from the node's own data
        (:attr:`fdp_flower.functional.sources.NodeFilesSource.node_local`); only then is the node
        config's policy read.  A key the site does not know is refused in every case (one-line
        :class:`SitePolicyError` naming the nearest known key), so that a misspelled ``data-path``
        or policy key never runs the node outside its policy.
        """
        check_node_config_keys(context.node_config)  # also off node-local data: a misspelled data-path
        requested = str(getattr(scenario.privacy, "noise_source", "seeded"))
        if not node_local:  # no site ledger, so no run key is needed
            return cls(False, 0, int(scenario.seed), requested)
        policy = SitePolicy.from_node_config(context.node_config)
        privacy = scenario.privacy
        if getattr(privacy, "enabled", False):  # the site decides whom it trusts, whatever the run config asks
            check_trust(policy, str(getattr(privacy, "trust", "site")), int(getattr(privacy, "tolerated", 0)))
        return cls(True, int(context.run_id), int(scenario.seed), requested, scenario_digest(scenario), policy,
                   SiteNoise.of(policy), SiteLedger(policy.ledger_path(), policy.ledger_head_path()))

    def admit(self, private: bool, what: str) -> None:
        """Refuse ``what`` if it would be released without noise and the site does not allow that."""
        if self.node_local:
            check_private(private, self.policy, what)

    def run_refusal(self, planned: Sequence[GaussianRelease]) -> str | None:
        """Why the site refuses a run at setup (one line), or None: the run's planned releases, composed with
        everything the site's ledger holds, would take it past its ``max-eps`` -- two runs on one site are then
        told apart before either releases, instead of both being refused half-way.  Releases of this run already
        on record (a restarted setup) count once.  Nothing is recorded; the setup reply carries the reason (the
        server stops the run), and every release is still checked on its own (a server that ignores it gains
        nothing)."""
        if not self.node_local or not planned:
            return None
        history = self.ledger.read()
        done = {h.key for h in history}
        new = [r for r in (SiteRelease(self.run_id, g, self.requested_source, self.scenario) for g in planned)
               if r.key not in done]
        eps_after = site_epsilon([*history, *new], self.policy)
        if eps_after > self.policy.max_eps:
            spent = site_epsilon(history, self.policy) if history else 0.0
            return (f"site refuses the run at setup: its {len(new)} planned releases would bring the site's eps to "
                    f"{eps_after:.6g} > max-eps {self.policy.max_eps:g} at delta {self.policy.max_delta:g} (spent so "
                    f"far {spent:.6g}); nothing was released")
        return None

    def noise_for(self, releases: GaussianRelease | Sequence[GaussianRelease]) -> np.random.Generator:
        """The generator of one draw's noise (:data:`fdp_flower.algorithms.protocol.NoiseSource`): ``releases``
        are the ledger events the draw serves (one in a real federation).  On node-local data each
        release is first checked against the site's policy and ledger and recorded there, fsynced (a
        refusal raises and records nothing).  Call it after the noise-free value is computed, right
        before the noise is drawn."""
        releases = [releases] if isinstance(releases, GaussianRelease) else list(releases)
        first = releases[0]
        if not self.node_local:
            return release_rng(self.run_seed, first.client, first.round, self.requested_source)
        if len(releases) != 1:
            raise SiteRefusal("a site's draw serves exactly one release")
        source = self.noise.source(self.requested_source, node_local=True)
        rng = self.noise.release_rng(source, node_local=True, run_seed=self.run_seed, run_id=self.run_id,
                                     client=first.client, round_=first.round)
        self.totals = self.ledger.charge(SiteRelease(self.run_id, first, source, self.scenario), self.policy)
        return rng

    def clipped_rows(self, count: int, *, client: int, round_: int, requested: bool) -> float | int | None:
        """What a reply may say about the count of ``client``'s clipped rows in ``round_`` (None: nothing).

        Node-local data -- the site decides, whatever the run config asks (``requested``): nothing unless
        its node config sets ``clipped-rows-sigma``; then the count plus Gaussian noise of that sigma
        (:func:`~fdp_flower.privacy.site_policy.clipped_rows_release`, sensitivity 1), checked against
        the site's policy and charged to its ledger, fsynced, before the noise is drawn (a refusal
        raises and releases nothing), from its own noise stream (not the primal's draws).  Other data
        (simulated, public: the server can count them itself): the exact count if ``requested``.
        """
        if not self.node_local:
            return int(count) if requested else None
        sigma = self.policy.clipped_rows_sigma
        if sigma is None:
            return None
        source = self.noise.source(self.requested_source, node_local=True)
        rng = self.noise.release_rng(source, node_local=True, run_seed=self.run_seed, run_id=self.run_id,
                                     client=client, round_=round_, stream=CLIPPED_ROWS_STREAM)
        self.totals = self.ledger.charge(SiteRelease(self.run_id, clipped_rows_event(client, round_, sigma), source,
                                                     self.scenario), self.policy)
        return clipped_rows_release(count, sigma, rng)

    def records(self) -> dict[str, ConfigRecord]:
        """``{"site": ConfigRecord}`` with the site's totals (lifetime and this run, PLD eps at its
        max-delta, its neighbouring relation) and noise source, for a reply; empty unless node-local."""
        if not self.node_local:
            return {}
        totals = self.totals if self.totals is not None else self.ledger.totals(self.policy, self.run_id)
        return {SITE_RECORD: ConfigRecord({**totals.as_record(),
                                           "noise-source": self.noise.source(self.requested_source,
                                                                             node_local=True)})}


def refusal_reply(msg: Message, exc: Exception, context: Context | None = None) -> Message:
    """The error reply of a refusal or a failure before anything was released (code
    CLIENT_APP_RAISED_EXCEPTION), its reason stripped of the node's local paths (:func:`public_reason`)."""
    return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=public_reason(exc, context)),
                   reply_to=msg)


def with_clipped_count(outcome, count: int | None, site: SiteSession):
    """``outcome`` (a :class:`~fdp_flower.algorithms.protocol.SiteRelease`) with the site's count of clipped rows in
    its metrics, and the sigma of that count's noise on the site's own data (``count`` None: unchanged)."""
    from dataclasses import replace

    if count is None:
        return outcome
    extra = {"clipped-rows": count}
    if site.node_local:
        extra["clipped-rows-sigma"] = float(site.policy.clipped_rows_sigma)
    return replace(outcome, metrics={**outcome.metrics, **extra})


def releases_reply(msg: Message, context: Context, site: SiteSession, released: list, refused: dict,
                   client_of, *, single: bool) -> Message:
    """The reply of a message's requests: a one-request message (``single``) that was refused is an error reply
    (nothing released); otherwise the releases and, per refused request ``j``, ``(client_of(j), code, public reason)``
    (:func:`fdp_flower.wire.pack_releases`), with the site's record."""
    from fdp_flower.wire import pack_releases
    from fdp_flower.wire.flwr import RecordDict

    if single and refused:
        return refusal_reply(msg, next(iter(refused.values())), context)
    code = int(ErrorCode.CLIENT_APP_RAISED_EXCEPTION)
    errors = [(client_of(j), code, public_reason(refused[j], context)) for j in sorted(refused)]
    return Message(content=RecordDict({**pack_releases(released, errors), **site.records()}), reply_to=msg)


__all__ = ["SITE_ERRORS", "SITE_RECORD", "SiteSession", "names_own_data", "public_reason", "refusal_reply",
           "releases_reply", "scenario_digest", "with_clipped_count"]
