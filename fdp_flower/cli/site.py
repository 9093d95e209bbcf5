"""A site operator's commands: its privacy ledger, and the app it approved.

``fdp-flower site-ledger``: status, repair, reset, adopt of the site's ledger.

The ledger is a hash chain with a head kept in another directory
(:mod:`fdp_flower.privacy.site_ledger`); a ledger that was cut, replaced, deleted, left on an
unmounted volume or torn by a crash fails closed, and only these explicit commands, each logged in
the ledger itself, make it usable again.  Every command names the ledger as the SuperNode does:
either with the SuperNode's own ``--node-config`` string (``ledger-dir``, ``ledger-head-dir``, and
``max-delta`` / ``neighbouring`` for the eps it reports; FLWR_HOME as in this shell), or with
``--ledger`` and ``--head``.  ``repair``, ``reset`` and ``adopt`` only say what they would do unless
given ``--yes`` (exit status 1 then: nothing changed).

Examples::

    fdp-flower site-ledger status --node-config 'ledger-dir="/var/lib/fdp-site0" max-delta=1e-5'
    fdp-flower site-ledger repair --ledger /var/lib/fdp-site0 --yes     # a torn last line (full disk)
    fdp-flower site-ledger adopt  --ledger /var/lib/fdp-site0 --yes     # a ledger written before chains
    fdp-flower site-ledger reset  --ledger /var/lib/fdp-site0 --yes --reason "new data set, new records"

``fdp-flower fab-hash``: the pins of an app bundle (a ``.fab`` file from ``flwr build``, or the app
directory ``flwr run`` would bundle); ``fdp-flower site-clientapp``: the site's ClientApp launcher
for a SuperNode started with ``--isolation process``, which runs an app bundle only if it matches one
of the site's pins (:mod:`fdp_flower.clients.site_launcher`; docs/deployment.md, section 11)::

    fdp-flower fab-hash fdp-flower.fdp-flower.0-1-0.1a2b3c4d.fab
    flower-supernode --isolation process --port 9094 ... &
    fdp-flower site-clientapp --runtime-api-address 127.0.0.1:9094 --insecure --allow-list /etc/fdp/apps.pins
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fdp_flower.privacy.site_ledger import SiteLedger, SiteLedgerError, default_head_path
from fdp_flower.privacy.site_policy import LEDGER_FILE_NAME, SitePolicy

ACTIONS = ("status", "repair", "reset", "adopt")


def ledger_of(args: argparse.Namespace) -> tuple[SiteLedger, SitePolicy]:
    """The ledger (and the policy: delta, relation) named by ``--node-config`` or ``--ledger`` / ``--head``."""
    from fdp_flower.engines.flower import parse_site_config

    policy = SitePolicy.from_node_config(parse_site_config(args.node_config)) if args.node_config else SitePolicy()
    if args.ledger:
        path = Path(args.ledger).expanduser()
        ledger = path / LEDGER_FILE_NAME if path.is_dir() or not path.suffix else path
    else:
        ledger = policy.ledger_path()
    if args.head:
        head = Path(args.head).expanduser()
        head = default_head_path(ledger, head) if head.is_dir() or not head.suffix else head
    elif args.ledger:
        head = default_head_path(ledger, policy.ledger_head_dir)
    else:
        head = policy.ledger_head_path()
    return SiteLedger(ledger.absolute(), head.absolute()), policy


def _cmd_site_ledger(args: argparse.Namespace) -> int:
    ledger, policy = ledger_of(args)
    delta, relation = policy.max_delta, policy.neighbouring
    try:
        if args.action == "status":
            trusted, line = ledger.status(delta, relation)
            print(line if trusted else f"refused: {line}")
            return 0 if trusted else 1
        if args.action == "repair":
            line = ledger.repair(yes=args.yes)
        elif args.action == "reset":
            line = ledger.reset(yes=args.yes, delta=delta, neighbouring=relation, reason=args.reason or "")
        else:
            line = ledger.adopt(yes=args.yes, delta=delta, neighbouring=relation)
    except SiteLedgerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(line)
    return 0 if args.yes or line.endswith("nothing to repair") or line.endswith("nothing to adopt") else 1


def _cmd_fab_hash(args: argparse.Namespace) -> int:
    from fdp_flower.clients.site_launcher import describe_fab
    from fdp_flower.privacy.site_fab import FabRefused

    try:
        print(describe_fab(args.source))
    except FabRefused as exc:
        print(f"error: {args.source}: {exc}", file=sys.stderr)
        return 1
    return 0


def _cmd_site_clientapp(args: argparse.Namespace) -> int:
    import logging

    from fdp_flower.clients.site_launcher import serve

    logging.getLogger("fdp_flower.site_launcher").setLevel(logging.INFO)
    logging.basicConfig(level=logging.WARNING, format="fdp-flower site-clientapp: %(message)s")
    if args.insecure == bool(args.root_certificates):
        raise ValueError("site-clientapp: give --insecure (runtime API on loopback without TLS) or "
                         "--root-certificates FILE, one of them")
    try:
        serve(args.runtime_api_address, insecure=args.insecure, root_certificates=args.root_certificates,
              pins=args.pin, allow_list=args.allow_list, apps_dir=args.apps_dir, poll_interval=args.poll_interval,
              parent_pid=args.parent_pid)
    except KeyboardInterrupt:
        return 0
    return 0


def register(subparsers) -> None:
    f = subparsers.add_parser("fab-hash", help="the pins of an app bundle (.fab file or app directory)",
                              description="Print the two pins of a Flower app bundle: sha256 of its bytes (Flower's "
                                          "FAB hash) and files-sha256 of its files (independent of compression).")
    f.add_argument("source", help="a .fab file (flwr build) or a Flower app directory (bundled as flwr run would)")
    f.set_defaults(func=_cmd_fab_hash)
    c = subparsers.add_parser("site-clientapp", help="run the SuperNode's ClientApps, only of approved app bundles",
                              description="In place of flower-superexec, for a SuperNode started with --isolation "
                                          "process: takes each ClientApp task, checks the app bundle against the "
                                          "site's pins before any of its code is imported, refuses (error reply) or "
                                          "runs it.")
    c.add_argument("--runtime-api-address", required=True, help="the SuperNode's runtime API (its --host:--port)")
    c.add_argument("--insecure", action="store_true", help="the runtime API without TLS (loopback)")
    c.add_argument("--root-certificates", help="CA certificate of the runtime API's TLS")
    c.add_argument("--pin", action="append", default=[], metavar="sha256:HEX",
                   help="an approved app (sha256:... or files-sha256:..., from fdp-flower fab-hash); repeatable")
    c.add_argument("--allow-list", metavar="FILE",
                   help="a file of pins, one per line (# comments); read for every task")
    c.add_argument("--apps-dir", metavar="DIR", help="where approved bundles are installed (default: "
                                                     "$FLWR_HOME/fdp-flower-site-apps)")
    c.add_argument("--poll-interval", type=float, default=1.0, help="seconds between task polls (default: 1)")
    c.add_argument("--parent-pid", type=int, help="exit when this process (e.g. the SuperNode) exits")
    c.set_defaults(func=_cmd_site_clientapp)

    p = subparsers.add_parser("site-ledger", help="a site's privacy ledger: status, repair, reset, adopt",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=ACTIONS, help="status: is it trusted, what does it hold; repair: remove a "
                                                   "torn last line; reset: start anew, saying what is forgotten; "
                                                   "adopt: take a ledger without a chain or without a head")
    p.add_argument("--node-config", default="", metavar="'KEY=VALUE ...'",
                   help="the SuperNode's --node-config (ledger-dir, ledger-head-dir, max-delta, neighbouring)")
    p.add_argument("--ledger", help="the ledger file, or its directory (default: from --node-config / FLWR_HOME)")
    p.add_argument("--head", help="the head file, or its directory (default: the ledger directory's sibling "
                                  "<ledger-dir>-head, or ledger-head-dir)")
    p.add_argument("--yes", action="store_true", help="do it (without: say what would be done, change nothing)")
    p.add_argument("--reason", help="reset: why (recorded in the new ledger's first line)")
    p.set_defaults(func=_cmd_site_ledger)
