"""A site's own privacy policy: what it accepts, where its noise comes from, what it has spent.

No Flower, and no file but the noise secret: :mod:`fdp_flower.privacy.site_ledger` keeps the
entries on the node's disk and :mod:`fdp_flower.clients.site` applies the policy to every release of a
ClientApp.  The server's run config can ask for more privacy, never less: whatever the
scenario says, a site releases only while its whole ledger -- every release that ever left it,
in any run -- composes (PLD accountant, the one of :mod:`fdp_flower.privacy.ledger`) to at most
``max_eps`` at ``max_delta`` under the site's neighbouring relation.

Node config keys (``flower-supernode --node-config '...'``; TOML values):

========================  ===================  ======================================================
key                       default              meaning
========================  ===================  ======================================================
``max-eps``               10.0                 eps the site accepts over its lifetime (all runs)
``max-delta``             1e-5                 delta at which that eps is computed
``neighbouring``          ``"replace_one"``    ``"replace_one"`` or ``"add_remove"``
``allow-nonprivate``      false                accept runs (or releases) without noise
``allow-seeded-noise``    false                use the run's noise source, e.g. noise from the run
                                               seed the server knows (reproducibility tests only)
``noise-secret-file``     (none)               noise from a secret only the site holds (reproducible
                                               by the site for its own audit)
``ledger-dir``            ``$FLWR_HOME/``      where the site ledger ``site-ledger.jsonl`` lives
                          ``fdp-flower-site``  (FLWR_HOME as the SuperNode sees it; Flower's default
                                               is ``~/.flwr``)
``ledger-head-dir``       ``<ledger-dir>-head``  where the ledger's head lives (another directory:
                                               :mod:`fdp_flower.privacy.site_ledger`)
``clipped-rows-sigma``    (none)               opt in to releasing the count of clipped rows, with
                                               Gaussian noise of this sigma, charged to the ledger
                                               (:func:`clipped_rows_release`); without it the count
                                               never leaves the site, whatever the run config asks
========================  ===================  ======================================================
"""
from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from fdp_flower.config.base import ScenarioError, _Frozen, validate_mapping
from fdp_flower.privacy.ledger import GaussianRelease, pld_epsilon
from fdp_flower.privacy.mechanisms import release_rng

#: SeedSequence spawn-key tag of noise derived from a site's secret (the run seed's noise uses
#: :data:`fdp_flower.privacy.mechanisms.NOISE_STREAM` = 1 and data 2).
SITE_SECRET_STREAM = 3
#: Spawn-key tag of the run seed's noise for a site's further releases of one (client, round) (stream >= 1,
#: e.g. the clipped-row count next to the primal), so that no two releases share a draw.
SITE_EXTRA_STREAM = 4
#: Ledger mechanism of the count of clipped rows; replacing (or adding, or removing) one record changes the
#: count by at most 1, so its l2-sensitivity is 1 under both relations.
CLIPPED_ROWS_MECHANISM = "clipped_rows_count"
#: Noise stream of the clipped-row count (:meth:`SiteNoise.release_rng`); the primal release uses stream 0.
CLIPPED_ROWS_STREAM = 1
#: Where the site ledger lives when the node config names no ``ledger-dir``: under FLWR_HOME.
DEFAULT_LEDGER_SUBDIR = "fdp-flower-site"
#: The site ledger's file name inside its directory.
LEDGER_FILE_NAME = "site-ledger.jsonl"
#: Least size of a noise secret (bytes): 128 bits.
MIN_SECRET_BYTES = 16

SITE_KEYS = ("max-eps", "max-delta", "neighbouring", "allow-nonprivate", "allow-seeded-noise",
             "noise-secret-file", "ledger-dir", "ledger-head-dir", "clipped-rows-sigma")
#: Node config keys that are not the policy's but are known: Flower's simulation sets the first two
#: (a deployment's node config names them itself), the ClientApp reads ``data-path``.
FLOWER_NODE_KEYS = ("partition-id", "num-partitions")
APP_NODE_KEYS = ("data-path",)
#: Every key a node config may hold; any other is refused (a misspelled policy key would otherwise
#: leave the site at that key's default, e.g. max-eps = 10).
KNOWN_NODE_KEYS = (*SITE_KEYS, *FLOWER_NODE_KEYS, *APP_NODE_KEYS)
#: Where a site's release noise comes from: the run seed (known to the server), the operating
#: system's CSPRNG, or the site's own secret.
NOISE_SOURCES = ("seeded", "os_entropy", "secret")


class SitePolicyError(ValueError):
    """A node config the site policy cannot use; one line naming the key."""


class SiteRefusal(RuntimeError):
    """The site refuses a request: nothing is released and its ledger is unchanged."""


def flower_home(env: Mapping[str, str] | None = None) -> Path:
    """FLWR_HOME if set, else Flower's default ``~/.flwr``."""
    env = os.environ if env is None else env
    return Path(env["FLWR_HOME"]) if env.get("FLWR_HOME") else Path.home() / ".flwr"


class SitePolicy(_Frozen):
    """What one site accepts, from its node config (keys in the module docstring).

    Fields are validated by their node config keys (``max-eps``, ...); an absent key takes its
    default.  Build it with :meth:`from_node_config`, which also refuses underscore spellings.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    max_eps: float = Field(10.0, alias="max-eps", gt=0, allow_inf_nan=False,
                           description="eps the site accepts over its lifetime (every release of every run)")
    max_delta: float = Field(1e-5, alias="max-delta", gt=0, lt=1, description="delta at which the site's eps "
                                                                             "is computed")
    neighbouring: Literal["replace_one", "add_remove"] = Field(
        "replace_one", description="the site's neighbouring relation (its ledger's sensitivities are "
                                   "re-expressed in it)")
    allow_nonprivate: bool = Field(False, alias="allow-nonprivate", description="accept releases without noise")
    allow_seeded_noise: bool = Field(False, alias="allow-seeded-noise", description="on node-local data, draw "
                                     "noise from the run's source (the run seed, known to the server): "
                                     "reproducibility tests only")
    noise_secret_file: str | None = Field(None, alias="noise-secret-file", min_length=1, max_length=4096,
                                          description="file whose bytes are the site's noise secret")
    ledger_dir: str | None = Field(None, alias="ledger-dir", min_length=1, max_length=4096,
                                   description="directory of site-ledger.jsonl (default $FLWR_HOME/"
                                               f"{DEFAULT_LEDGER_SUBDIR})")
    ledger_head_dir: str | None = Field(None, alias="ledger-head-dir", min_length=1, max_length=4096,
                                        description="directory of the ledger's head (default: the ledger "
                                                    "directory's sibling <ledger-dir>-head); not the ledger's own")
    clipped_rows_sigma: float | None = Field(None, alias="clipped-rows-sigma", gt=0, allow_inf_nan=False,
                                             description="release the count of clipped rows with Gaussian noise of "
                                                         "this sigma, charged (default: never release it)")

    @model_validator(mode="after")
    def _one_noise_choice(self):
        if self.allow_seeded_noise and self.noise_secret_file is not None:
            raise ValueError("allow-seeded-noise=true and noise-secret-file are exclusive: choose one")
        return self

    @classmethod
    def from_node_config(cls, node_config: Mapping[str, object]) -> SitePolicy:
        """The policy of a node config (Flower's ``context.node_config``).  Every key must be known
        (:func:`check_node_config_keys`: the policy's, Flower's ``partition-id`` / ``num-partitions``
        and the app's ``data-path``), so that a typo never silently loosens the policy.  One-line
        :class:`SitePolicyError`."""
        check_node_config_keys(node_config)
        try:
            return validate_mapping(cls, {k: v for k, v in node_config.items() if k in SITE_KEYS}, "node config")
        except ScenarioError as exc:
            raise SitePolicyError(str(exc)) from None

    def ledger_path(self, env: Mapping[str, str] | None = None) -> Path:
        """``<ledger-dir>/site-ledger.jsonl``; without ``ledger-dir``, under FLWR_HOME (``env``, default
        ``os.environ``; Flower's default ``~/.flwr``)."""
        base = Path(self.ledger_dir).expanduser() if self.ledger_dir else flower_home(env) / DEFAULT_LEDGER_SUBDIR
        return base / LEDGER_FILE_NAME

    def ledger_head_path(self, env: Mapping[str, str] | None = None) -> Path:
        """The head file of :meth:`ledger_path` (:func:`fdp_flower.privacy.site_ledger.default_head_path`): in
        ``ledger-head-dir``, else in the ledger directory's sibling ``<ledger-dir>-head``."""
        from fdp_flower.privacy.site_ledger import default_head_path

        return default_head_path(self.ledger_path(env), self.ledger_head_dir)

    @model_validator(mode="after")
    def _head_apart(self):
        for key, value in (("ledger-dir", self.ledger_dir), ("ledger-head-dir", self.ledger_head_dir)):
            if value is not None and not Path(value).expanduser().is_absolute():
                raise ValueError(f"{key} must be an absolute path, got {value!r} (a relative one would name another "
                                 "directory in every working directory)")
        if self.ledger_head_dir is not None:
            head = Path(self.ledger_head_dir).expanduser().absolute()
            ledger = Path(self.ledger_dir).expanduser().absolute() if self.ledger_dir else None
            if ledger is not None and head == ledger:
                raise ValueError("ledger-head-dir must not be ledger-dir: a head kept with its ledger is deleted "
                                 "with it")
        return self


def nearest_node_key(key: str) -> str | None:
    """The known node config key (:data:`KNOWN_NODE_KEYS`) closest to ``key``, or None: the same key up to
    case and ``_`` / ``-``, else the closest spelling (difflib ratio >= 0.6, e.g. ``max-esp``,
    ``max-epsilon`` -> ``max-eps``)."""
    import difflib

    normal = str(key).strip().lower().replace("_", "-")
    if normal in KNOWN_NODE_KEYS:
        return normal
    close = difflib.get_close_matches(normal, KNOWN_NODE_KEYS, n=1, cutoff=0.6)
    return close[0] if close else None


def check_node_config_keys(node_config: Mapping[str, object]) -> None:
    """Refuse (one-line :class:`SitePolicyError`) the first key of ``node_config`` that is not in
    :data:`KNOWN_NODE_KEYS`, naming the nearest known key."""
    for key in node_config:
        if key in KNOWN_NODE_KEYS:
            continue
        nearest = nearest_node_key(key)
        hint = f"did you mean {nearest!r}?" if nearest else f"known keys: {', '.join(KNOWN_NODE_KEYS)}"
        raise SitePolicyError(f"node config key {key!r} is not known; {hint} (the site refuses every key it does "
                              "not know: a misspelled policy key would leave its setting at the default)")


@dataclass(frozen=True)
class SiteNoise:
    """Where a site's release noise comes from (the site decides for node-local data).

    ``secret`` is the site's noise secret (:func:`read_noise_secret`) or None.
    """

    policy: SitePolicy
    secret: int | None = field(default=None, repr=False)

    @classmethod
    def of(cls, policy: SitePolicy) -> SiteNoise:
        """Read the policy's secret file, if any."""
        return cls(policy, None if policy.noise_secret_file is None else read_noise_secret(policy.noise_secret_file))

    def source(self, requested: str, *, node_local: bool) -> str:
        """The noise source of a release.

        Data that are not node-local (simulated from the run seed, public tabular sets: the
        server can compute them anyway) follow the run's ``requested`` source (the scenario's
        ``privacy.noise_source``, ``seeded`` by default).  Node-local data: the site's secret if it
        gave one, else the operating system's entropy; the run's choice only if the site opted in
        (``allow-seeded-noise``).
        """
        if not node_local or self.policy.allow_seeded_noise:
            return requested
        return "secret" if self.secret is not None else "os_entropy"

    def release_rng(self, source: str, *, node_local: bool, run_seed: int, run_id: int, client: int,
                    round_: int, stream: int = 0) -> np.random.Generator:
        """The generator of one release's noise from ``source`` (:meth:`source`).

        ``seeded``: :func:`fdp_flower.privacy.mechanisms.release_rng` of the run seed, refused for
        node-local data unless the site opted in; ``secret``: a SeedSequence of the site's secret
        with spawn key (3, run id, client, round), so the site, and only the site, can regenerate
        its noise; ``os_entropy``: 128 fresh bits from the operating system.  ``stream`` >= 1: a
        further release of the same (client, round) with its own draws (spawn key (4, stream,
        client, round) of the run seed, (3, run id, client, round, stream) of the secret).
        """
        if stream < 0:
            raise ValueError(f"stream must be >= 0, got {stream}")
        if source == "seeded" and node_local and not self.policy.allow_seeded_noise:
            raise SiteRefusal("seeded noise on node-local data is refused: the server knows the run seed; set "
                              "allow-seeded-noise=true in the node config only for reproducibility tests")
        if source == "secret":
            if self.secret is None:
                raise SiteRefusal("noise source 'secret' needs noise-secret-file in the node config")
            return secret_release_rng(self.secret, run_id, client, round_, stream)
        if source not in NOISE_SOURCES:
            raise SiteRefusal(f"noise source must be one of {', '.join(NOISE_SOURCES)}, got {source!r}")
        if stream and source == "seeded":
            return np.random.default_rng(np.random.SeedSequence(
                int(run_seed), spawn_key=(SITE_EXTRA_STREAM, int(stream), int(client), int(round_))))
        return release_rng(run_seed, client, round_, source)


def secret_release_rng(secret: int, run_id: int, client: int, round_: int, stream: int = 0) -> np.random.Generator:
    """Noise generator of a site secret for (run, client, round) and, for ``stream`` >= 1, a further release
    of the same round (see :meth:`SiteNoise.release_rng`)."""
    if min(run_id, client, round_, stream) < 0:
        raise ValueError(f"run id, client, round and stream must be >= 0, got {run_id}, {client}, {round_}, {stream}")
    key = (SITE_SECRET_STREAM, int(run_id), int(client), int(round_)) + ((int(stream),) if stream else ())
    return np.random.default_rng(np.random.SeedSequence(secret, spawn_key=key))


def clipped_rows_event(client: int, round_: int, sigma: float) -> GaussianRelease:
    """The ledger event of a Gaussian release of the count of clipped rows.

    The count c(D) = #{j : row j of D was clipped} is a sum of per-record indicators (each row is clipped
    on its own norm, against the public basis and clip), so replacing one record changes it by at most
    1, and so does adding or removing one: l2-sensitivity 1 under both relations (factor 1 in
    :data:`fdp_flower.privacy.ledger.NEIGHBOURING_FACTORS`).  A server that changes the basis between
    requests gets a new count each time, each one charged (adaptive composition).
    """
    return GaussianRelease(int(client), int(round_), 1.0, float(sigma), mechanism=CLIPPED_ROWS_MECHANISM)


def clipped_rows_release(count: int, sigma: float, rng: np.random.Generator) -> float:
    """The released count of clipped rows: ``count`` + N(0, ``sigma``^2), the Gaussian mechanism of
    sensitivity 1 (:func:`clipped_rows_event`); not rounded, not clamped (post-processing is the reader's)."""
    if isinstance(count, bool) or int(count) != count or count < 0:
        raise ValueError(f"count must be a non-negative integer, got {count!r}")
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be finite and > 0, got {sigma!r}")
    return float(count) + float(sigma) * float(rng.standard_normal())


def read_noise_secret(path: str | Path) -> int:
    """The site's secret: SHA-256 of the file's bytes, as an integer (the file needs >= 16 bytes)."""
    path = Path(path).expanduser()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SitePolicyError(f"node config noise-secret-file {str(path)!r}: {exc.strerror or exc}") from None
    if len(data) < MIN_SECRET_BYTES:
        raise SitePolicyError(f"node config noise-secret-file {str(path)!r} holds {len(data)} bytes; a secret needs "
                              f"at least {MIN_SECRET_BYTES} (e.g. head -c 32 /dev/urandom > {path.name})")
    return int.from_bytes(hashlib.sha256(data).digest(), "big")


# ---------------------------------------------------------------------- what the site spent
@dataclass(frozen=True)
class SiteRelease:
    """One release that left the site: its ledger event and the run it belongs to.

    ``run`` is the Flower run id: a resumed run has a new one, so its releases are charged
    next to the original run's; within one run a (client, mechanism, round) is released once.
    """

    run: int
    release: GaussianRelease
    noise_source: str
    scenario: str = ""  # digest of the run's scenario (tells a resumed run from a new one)
    time: str = ""

    @property
    def key(self) -> tuple[int, int, str, int]:
        """What a re-release repeats: (run, client, mechanism, round)."""
        return (self.run, self.release.client, self.release.mechanism, self.release.round)


@dataclass(frozen=True)
class SiteTotals:
    """What a site has spent, by the PLD accountant at ``delta`` under ``neighbouring``."""

    eps: float  # every release of the site's lifetime
    releases: int
    run_eps: float  # the releases of one run
    run_releases: int
    delta: float
    neighbouring: str
    max_eps: float

    def as_record(self) -> dict[str, float | int | str]:
        """The site's report in a reply (a Flower ``ConfigRecord``)."""
        return {"eps": self.eps, "releases": self.releases, "run-eps": self.run_eps,
                "run-releases": self.run_releases, "delta": self.delta, "neighbouring": self.neighbouring,
                "max-eps": self.max_eps}


def site_epsilon(releases: Sequence[SiteRelease], policy: SitePolicy) -> float:
    """eps of the site's ``releases`` by the PLD accountant at ``policy.max_delta``, each re-expressed under
    ``policy.neighbouring`` (:meth:`GaussianRelease.under`).

    Gaussian releases with multipliers z_t = sigma_t / Delta_t compose exactly into one Gaussian with
    multiplier (sum_t z_t^-2)^(-1/2) (their privacy-loss distributions are Gaussian), so the accountant
    is asked about that one Gaussian: the same eps as composing release by release when the multipliers
    are equal, slightly tighter otherwise (less accumulated discretization, ~5e-7 relative at 40
    distinct multipliers), and one evaluation per check however long the site's ledger grows.
    """
    try:
        converted = [r.release.under(policy.neighbouring) for r in releases]
    except ValueError as exc:
        raise SiteRefusal(f"site ledger: {exc}") from None
    precision = sum(1.0 / r.noise_multiplier**2 for r in converted if r.sensitivity > 0)
    if precision == 0:
        return 0.0
    return pld_epsilon([GaussianRelease(0, 0, 1.0, precision**-0.5)], policy.max_delta)


def site_totals(history: Sequence[SiteRelease], policy: SitePolicy, run: int,
                lifetime_eps: float | None = None) -> SiteTotals:
    """The site's lifetime and per-run eps (:func:`site_epsilon`); ``lifetime_eps``: the lifetime figure when
    the caller has it already (:func:`check_release` returns it), so that a charge costs one accountant call
    when all the site's releases are of one run."""
    in_run = [r for r in history if r.run == run]
    eps = site_epsilon(history, policy) if lifetime_eps is None else float(lifetime_eps)
    return SiteTotals(eps=eps, releases=len(history),
                      run_eps=eps if len(in_run) == len(history) else site_epsilon(in_run, policy),
                      run_releases=len(in_run), delta=policy.max_delta, neighbouring=policy.neighbouring,
                      max_eps=policy.max_eps)


def check_release(history: Sequence[SiteRelease], planned: SiteRelease, policy: SitePolicy) -> float:
    """Refuse ``planned`` (:class:`SiteRefusal`, one line) if it repeats a release of the same run,
    client, mechanism and round, or if the site's whole ledger plus it would exceed
    (``max_eps``, ``max_delta``); else return the site's eps after it."""
    r = planned.release
    if any(h.key == planned.key for h in history):
        raise SiteRefusal(f"site refuses a re-release: run {planned.run} already received client {r.client}'s "
                          f"{r.mechanism} release of round {r.round}")
    eps_after = site_epsilon([*history, planned], policy)
    if eps_after > policy.max_eps:
        eps_now = site_epsilon(history, policy)
        raise SiteRefusal(f"site refuses: client {r.client}'s {r.mechanism} release of round {r.round} would bring "
                          f"the site's eps to {eps_after:.6g} > max-eps {policy.max_eps:g} at delta "
                          f"{policy.max_delta:g} ({policy.neighbouring}, PLD; {eps_now:.6g} spent in "
                          f"{len(history)} releases)")
    return eps_after


def check_private(private: bool, policy: SitePolicy, what: str) -> None:
    """Refuse a release without noise (``private`` false) unless the site allows it."""
    if not private and not policy.allow_nonprivate:
        raise SiteRefusal(f"site refuses {what} without noise: set allow-nonprivate=true in the node config to "
                          "accept non-private runs")


__all__ = ["CLIPPED_ROWS_MECHANISM", "CLIPPED_ROWS_STREAM", "KNOWN_NODE_KEYS", "NOISE_SOURCES", "SITE_KEYS",
           "SiteNoise", "SitePolicy", "SitePolicyError", "SiteRefusal", "SiteRelease", "SiteTotals",
           "check_node_config_keys", "check_private", "check_release", "clipped_rows_event", "clipped_rows_release",
           "flower_home", "nearest_node_key", "read_noise_secret", "secret_release_rng", "site_epsilon",
           "site_totals"]
