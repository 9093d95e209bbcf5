"""The site runs only the app it approved: a ClientApp launcher that checks each app bundle first.

A SuperNode started with ``--isolation process`` runs no app code itself: it stores each message
and the run's app bundle (FAB) and waits for a process to take the task from its runtime API (on
its own ``--port``, loopback).  Flower's ``flower-superexec`` takes every task and starts
``flwr-clientapp``, which installs and imports whatever FAB the server sent.  This launcher takes
its place (``fdp-flower site-clientapp``, installed from the site's own approved wheel, outside any
FAB): for each ClientApp task it starts a new process (:func:`run_task`) that

1. pulls the task's input -- message, context, run and FAB bytes -- from the SuperNode (data only);
2. checks the FAB against the site's pins (:func:`fdp_flower.privacy.site_fab.check_fab`: the SHA-256
   of its bytes, or of its files, must be one the site approved, and the hash the SuperLink announced
   must be the bytes' own);
3. **refused**: replies to the message with an error (``ErrorCode.INVALID_FAB``, the reason in one
   line), marks the task failed and exits -- nothing of the FAB was extracted or imported, so none of
   its code touched the data;
4. **approved**: installs the FAB into the site's own apps directory (``<apps-dir>/<sha256>/``, mode
   0700, once per approved bundle; a later task reuses it after checking every file against the
   bundle's, :func:`installed_app`), imports its ClientApp from there (modules of the same name
   loaded by the launcher are dropped first, so the app's own copies run), runs it on the message
   and pushes the reply and the context, as ``flwr-clientapp`` does.

The pure part (digests, pins, allow-list files) is :mod:`fdp_flower.privacy.site_fab`.  Flower
1.41 facts this relies on (``flwr/supernode/start_client_internal.py``): with ``--isolation
process`` the SuperNode starts no ``flower-superexec``; it verifies a FAB only against
``--trusted-entities`` (Ed25519 signatures that Flower's platform issues) and otherwise stores
whatever the SuperLink sends (``get_fab(run_info.fab_hash, run_id)``) without comparing its bytes
with ``fab_hash``; ``flwr-clientapp`` (``flwr/supernode/runtime/run_clientapp.py``) installs the FAB
(``install_from_fab``) and imports its ClientApp before it runs anything, with no hook in between.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

from fdp_flower.privacy.site_fab import (
    FabDigests,
    FabRefused,
    Pin,
    check_fab,
    fab_digests,
    parse_pin,
    read_allow_list,
)
from fdp_flower.privacy.site_policy import flower_home

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Error, Message
    from flwr.common.constant import ErrorCode, SubStatus

LOG = logging.getLogger("fdp_flower.site_launcher")
#: Where approved bundles are installed when no ``--apps-dir`` is given: under FLWR_HOME.
DEFAULT_APPS_SUBDIR = "fdp-flower-site-apps"
#: What the launcher asks the SuperNode for: ClientApp tasks only.
CLIENT_APP_TASK = "flwr-clientapp"


def site_pins(pins: Sequence[str], allow_list: str | None) -> list[Pin]:
    """The pins given on the command line and in the allow-list file (read again for every task)."""
    out = [parse_pin(p, "--pin") for p in pins]
    if allow_list:
        out += read_allow_list(allow_list)
    return out


def build_fab(app_dir: str | Path) -> bytes:
    """The FAB ``flwr run <app_dir>`` / ``flwr build`` would make of a directory, with this Flower."""
    from flwr.cli.build import build_fab_from_disk

    app = Path(app_dir).expanduser().resolve()
    if not (app / "pyproject.toml").is_file():
        raise ValueError(f"{app_dir}: not a Flower app directory (no pyproject.toml)")
    with warnings.catch_warnings():  # pathspec's deprecation of the pattern style Flower uses
        warnings.simplefilter("ignore", DeprecationWarning)
        return build_fab_from_disk(app)


def fab_bytes(source: str | Path) -> bytes:
    """A ``.fab`` file's bytes, or the FAB Flower builds from an app directory."""
    path = Path(source).expanduser()
    if path.is_dir():
        return build_fab(path)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{source}: {exc.strerror or exc}") from None


def describe_fab(source: str | Path) -> str:
    """``fdp-flower fab-hash``'s output: both pins of a FAB and the number of files it installs."""
    digests = fab_digests(fab_bytes(source))
    return (f"sha256:{digests.sha256}\nfiles-sha256:{digests.files_sha256}\n"
            f"# {source}: {len(digests.files)} files, {sum(s for _n, _h, s in digests.files)} bytes unpacked")


# ------------------------------------------------------------------ one task (a new process per task)
def _runtime_client(address: str, *, insecure: bool, root_certificates: str | None, token: str | None,
                    component: str):
    from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient
    from flwr.supercore.tls import validate_and_resolve_root_certificates

    interceptors = [RuntimeVersionHttpInterceptor(component_name=component)]
    if token is not None:
        interceptors.append(RuntimeTokenHttpInterceptor(token))
    return RuntimeHttpClient.from_server_address(
        server_address=address, insecure=insecure,
        root_certificates=validate_and_resolve_root_certificates(root_certificates, insecure),
        interceptors=interceptors, retry_invoker=make_simple_http_retry_invoker())


def default_apps_dir() -> Path:
    """``$FLWR_HOME/fdp-flower-site-apps`` (Flower's default FLWR_HOME ``~/.flwr``)."""
    return flower_home() / DEFAULT_APPS_SUBDIR


def _matches(app_dir: Path, digests: FabDigests) -> bool:
    """Whether ``app_dir`` holds exactly the bundle's files, byte for byte (Python's ``__pycache__`` aside)."""
    import hashlib

    expected = {name: sha for name, sha, _size in digests.files}
    found = {}
    for path in app_dir.rglob("*"):
        if path.is_dir() or "__pycache__" in path.relative_to(app_dir).parts:
            continue
        found[path.relative_to(app_dir).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found == expected


def installed_app(content: bytes, digests: FabDigests, apps_dir: Path) -> Path:
    """The approved bundle installed in ``<apps_dir>/<sha256>`` (Flower's ``install_from_fab``: its files,
    checked against the bundle's manifest); installed once and reused while every file still matches the
    bundle's (else installed again)."""
    from flwr.cli.install import install_from_fab

    apps_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    target = apps_dir / digests.sha256
    if target.is_dir() and _matches(target, digests):
        return target
    staging = Path(tempfile.mkdtemp(prefix=".install-", dir=apps_dir))
    try:
        installed = install_from_fab(content, install_dir=staging, skip_prompt=True)
        try:
            os.rename(installed, target)
        except OSError:  # another task installed it meanwhile, or a stale copy is in the way
            if not (target.is_dir() and _matches(target, digests)):
                shutil.rmtree(target, ignore_errors=True)
                os.rename(installed, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not _matches(target, digests):
        raise FabRefused(f"the installed app in {target} does not match the approved bundle's files")
    return target


def _forget_modules_of(app_dir: Path) -> None:
    """Drop every loaded module whose top-level name the app provides, so that importing the app loads
    the app's own files (the launcher itself has loaded ``fdp_flower`` from the site's installation)."""
    tops = {p.stem for p in app_dir.iterdir() if p.suffix == ".py"} | \
           {p.name for p in app_dir.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    for name in [m for m in sys.modules if m.split(".", 1)[0] in tops]:
        del sys.modules[name]


def run_task(address: str, token: str, *, insecure: bool, root_certificates: str | None, pins: Sequence[str],
             allow_list: str | None, apps_dir: str | Path | None = None, parent_pid: int | None = None) -> int:
    """Run one ClientApp task of the SuperNode at ``address`` -- only if its FAB is one the site approved
    (module docstring).  Returns the process's exit status: 0 the app ran and replied, 3 the FAB was
    refused (an error reply was sent), 1 the app failed (an error reply was sent if possible)."""
    from flwr.clientapp.client_app import LoadClientAppError
    from flwr.clientapp.utils import get_load_client_app_fn
    from flwr.supercore.app_utils import start_parent_process_monitor
    from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
    from flwr.supernode.runtime.run_clientapp import pull_task_input, push_message, push_task_output

    if parent_pid is not None:
        start_parent_process_monitor(parent_pid)
    client = _runtime_client(address, insecure=insecure, root_certificates=root_certificates, token=token,
                             component="flwr-clientapp")
    heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
    heartbeat.start()
    message = context = None
    status, details, code = SubStatus.FAILED, "", 1
    try:
        message, context, run, fab = pull_task_input(client)  # data only: no code of the FAB is loaded
        try:
            approved = site_pins(pins, allow_list)
            digests, pin = check_fab(fab.content, fab.hash_str, approved)
        except (FabRefused, ValueError) as exc:
            details = " ".join(str(exc).split())
            LOG.error("run %s: %s", run.run_id, details)
            push_message(client, Message(Error(code=ErrorCode.INVALID_FAB, reason=details), reply_to=message),
                         context)
            context = None  # the node's state stays as it was
            code = 3
            return code
        LOG.info("run %s: app bundle sha256:%s approved by pin %s", run.run_id, digests.sha256, pin)
        try:
            app_dir = installed_app(fab.content, digests, Path(apps_dir) if apps_dir else default_apps_dir())
            _forget_modules_of(app_dir)
            client_app = get_load_client_app_fn(default_app_ref="", app_path=str(app_dir), multi_app=True)(
                run.fab_id, run.fab_version, fab.hash_str)
            reply = client_app(message=message, context=context)
        except Exception as exc:  # noqa: BLE001  (like flwr-clientapp: the failure becomes an error reply)
            LOG.error("run %s: the ClientApp failed", run.run_id, exc_info=exc)
            load = isinstance(exc, (LoadClientAppError, ImportError))
            details = ("An exception was raised when attempting to load `ClientApp`" if load else
                       f"{type(exc)}:<'{exc}'>")
            reply = Message(Error(code=ErrorCode.LOAD_CLIENT_APP_EXCEPTION if load else
                                  ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=details), reply_to=message)
            push_message(client, reply, context)
            return code
        push_message(client, reply, context)
        status, details, code = SubStatus.COMPLETED, "", 0
        return code
    finally:
        try:
            push_task_output(client=client, context=context, sub_status=status, details=details)
        finally:
            heartbeat.stop()
            client.close()


# ------------------------------------------------------------------ the launcher loop
def serve(address: str, *, insecure: bool, root_certificates: str | None, pins: Sequence[str],
          allow_list: str | None, apps_dir: str | Path | None = None, poll_interval: float = 1.0,
          parent_pid: int | None = None) -> None:
    """Take ClientApp tasks from the SuperNode's runtime API at ``address`` and run each in a new process
    (:func:`run_task`); never returns (stop it with SIGTERM / Ctrl-C).  Refuses to start without a pin."""
    from flwr.proto.runtime_pb2 import AcquireTaskRequest  # pylint: disable=no-name-in-module
    from flwr.supercore.app_utils import start_parent_process_monitor

    approved = site_pins(pins, allow_list)  # a bad pin or allow-list fails here, in one line
    if not approved:
        raise ValueError("site-clientapp: give the apps the site approved (--pin sha256:... or --allow-list FILE; "
                         "fdp-flower fab-hash <app dir or .fab> prints the pins)")
    if parent_pid is not None:
        start_parent_process_monitor(parent_pid)
    client = _runtime_client(address, insecure=insecure, root_certificates=root_certificates, token=None,
                             component="SuperExec")
    LOG.info("site-clientapp: serving the SuperNode at %s; approved apps: %s", address,
             ", ".join(str(p) for p in approved))
    children: list[subprocess.Popen] = []
    base = [sys.executable, "-m", "fdp_flower.clients.site_launcher", "--runtime-api-address", address,
            *(["--insecure"] if insecure else ["--root-certificates", root_certificates] if root_certificates else []),
            *[arg for p in pins for arg in ("--pin", p)], *(["--allow-list", allow_list] if allow_list else []),
            "--apps-dir", str(Path(apps_dir).expanduser().absolute() if apps_dir else default_apps_dir()),
            "--parent-pid", str(os.getpid())]
    try:
        while True:
            children = [c for c in children if c.poll() is None]  # reap finished tasks
            res = client.AcquireTask(AcquireTaskRequest(supported_task_types=[CLIENT_APP_TASK]))
            if res.HasField("task") and res.token:
                LOG.info("site-clientapp: task %s of run %s", res.task.task_id, res.task.run_id)
                children.append(subprocess.Popen([*base, "--token", res.token]))
            time.sleep(poll_interval)
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m fdp_flower.clients.site_launcher --token T ...``: one task (what :func:`serve` starts)."""
    parser = argparse.ArgumentParser(prog="python -m fdp_flower.clients.site_launcher",
                                     description="Run one ClientApp task, only if its app bundle is approved.")
    parser.add_argument("--runtime-api-address", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--insecure", action="store_true")
    parser.add_argument("--root-certificates")
    parser.add_argument("--pin", action="append", default=[])
    parser.add_argument("--allow-list")
    parser.add_argument("--apps-dir")
    parser.add_argument("--parent-pid", type=int)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="fdp-flower site-clientapp: %(message)s")
    LOG.setLevel(logging.INFO)
    return run_task(args.runtime_api_address, args.token, insecure=args.insecure,
                    root_certificates=args.root_certificates, pins=args.pin, allow_list=args.allow_list,
                    apps_dir=args.apps_dir, parent_pid=args.parent_pid)


__all__ = ["build_fab", "default_apps_dir", "describe_fab", "fab_bytes", "installed_app", "main", "run_task", "serve",
           "site_pins"]

if __name__ == "__main__":
    sys.exit(main())
