"""Real Flower federations on loopback, started and stopped by PID.

:class:`LoopbackFederation`: one SuperLink and N SuperNodes with node-local files (deployment;
the one-command demo ``scripts/deploy_demo.sh`` / ``python -m fdp_flower.engines.flower`` and the
deployment tests).  :class:`SimulationFederation`: a SuperLink running Flower's simulation runtime
(``fdp-flower run --engine flower`` and the Flower end-to-end tests).  Every process is started
in its own process group and stopped by its PID's group (SIGTERM, then SIGKILL), also on
failure.  Every process started here carries a mark in its environment (``FDP_FLOWER_LAUNCH``), which
Flower passes on to every process it starts in turn (flower-superexec, flwr-serverapp,
flwr-simulation, flwr-clientapp, Ray's workers): :meth:`Federation.stop` kills every process with the
mark, also those that left our process groups and sessions or lost their parent (a SIGKILLed
SuperLink's ServerApp).  Nothing here touches a process it did not start.

Flower 1.41: the SuperLink serves the Fleet, Control and ServerAppIo APIs over HTTP on
one port (``--port``); each SuperNode has its own runtime port (``--port``); the
``flwr`` CLI finds the SuperLink in ``$FLWR_HOME/config.toml``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from fdp_flower.config.base import APP_DIR

CONNECTION = "loopback"
#: the environment variable that marks every process a federation started, and every process those start:
#: ``<federation token>/<name>`` (name: ``superlink``, ``supernode-<i>[-restart<k>]``, ``flwr``)
LAUNCH_MARK = "FDP_FLOWER_LAUNCH"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process {proc.pid} exited with code {proc.returncode} before listening on {port}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f}s")


def _bin(name: str) -> str:
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or name)


@dataclass
class Federation:
    """What the two loopback federations share: a work dir with its own ``FLWR_HOME``, processes
    started in their own process groups, ``flwr run`` / ``flwr ls`` against connection
    ``connection``, and :meth:`stop`, which is idempotent and always runs on exit."""

    workdir: Path
    app_dir: Path = APP_DIR
    connection: str = CONNECTION
    processes: list[subprocess.Popen] = field(default_factory=list)
    link_port: int = 0
    stopped_pids: list[int] = field(default_factory=list)
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(FLWR_HOME=str(self.workdir / "flwr_home"), FLWR_TELEMETRY_ENABLED="0",
                   FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1", FLWR_DISABLE_UPDATE_CHECK="1",
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
        return env

    def _command(self, name: str, args: list[str]) -> list[str]:
        """The command line of process ``name`` (``superlink``, ``supernode-<i>[-restart<k>]``, ``flwr``):
        ``args`` itself here; a federation spread over network namespaces runs it in its party's namespace
        (tests/netns_harness.py)."""
        return args

    def _marked_env(self, name: str) -> dict[str, str]:
        return {**self.env, LAUNCH_MARK: f"{self.token}/{name}"}

    def marked_processes(self, name: str | None = None) -> list[int]:
        """PIDs of the live processes carrying this federation's mark (``name``: only process ``name``,
        its restarts and what they started), from ``/proc/<pid>/environ``; empty without /proc."""
        found = []
        for environ in Path("/proc").glob("[0-9]*/environ"):
            try:
                pid = int(environ.parent.name)
                if pid == os.getpid():
                    continue
                marks = [v for v in environ.read_bytes().split(b"\0") if v.startswith(LAUNCH_MARK.encode() + b"=")]
                state = (environ.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, ValueError, IndexError):
                continue
            if not marks or state == "Z":  # a zombie has exited already (its parent reaps it)
                continue
            token, _, started = marks[0].decode(errors="replace").split("=", 1)[1].partition("/")
            if token == self.token and (name is None or started == name or started.startswith(f"{name}-")):
                found.append(pid)
        return sorted(found)

    def _kill_marked(self, name: str | None = None, timeout: float = 10.0) -> list[int]:
        """SIGKILL every process with this federation's mark (``name``: :meth:`marked_processes`) until none
        is left; returns their PIDs."""
        killed: list[int] = []
        deadline = time.monotonic() + timeout
        while (alive := self.marked_processes(name)) and time.monotonic() < deadline:
            for pid in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            killed += [pid for pid in alive if pid not in killed]
            time.sleep(0.05)
        for proc in self.processes:  # reap our own children among them
            proc.poll()
        return killed

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "w")  # noqa: SIM115 (closed right after the spawn)
        proc = subprocess.Popen(self._command(name, args), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=self._marked_env(name), cwd=self.workdir, start_new_session=True)
        log.close()
        self.processes.append(proc)
        return proc

    def _write_connection(self) -> None:
        """``$FLWR_HOME/config.toml``: the one connection ``connection`` to our SuperLink, the default."""
        (self.workdir / "flwr_home" / "config.toml").write_text(
            f'[superlink]\ndefault = "{self.connection}"\n\n[superlink.{self.connection}]\n'
            f'address = "127.0.0.1:{self.link_port}"\ninsecure = true\n')

    def start(self, timeout: float = 60.0) -> Federation:
        raise NotImplementedError

    def _flwr(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(self._command("flwr", [_bin("flwr"), *args]), env=self._marked_env("flwr"),
                                  cwd=self.app_dir, capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:  # a TimeoutError: callers report it in one line
            raise TimeoutError(f"flwr {args[0]} still running after {timeout:.0f}s") from None

    def _flwr_streamed(self, *args: str, echo, timeout: float) -> str:
        """Run ``flwr`` and pass each output line to ``echo`` as it arrives; returns the whole output."""
        proc = subprocess.Popen(self._command("flwr", [_bin("flwr"), *args]), env=self._marked_env("flwr"), cwd=self.app_dir, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
        lines, deadline = [], time.monotonic() + timeout
        try:
            for line in proc.stdout:
                lines.append(line)
                echo(line.rstrip("\n"))
                if time.monotonic() > deadline:
                    raise TimeoutError(f"flwr {args[0]} still streaming after {timeout:.0f}s")
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        return "".join(lines)

    def federation_config(self) -> list[str]:
        """Extra ``flwr run`` arguments of this federation (the simulation's SuperNode count)."""
        return []

    def run(self, run_config: dict[str, object], timeout: float = 600.0, echo=None) -> tuple[int, str]:
        """``flwr run`` the app with ``run_config``; wait until it finishes; returns (run id, status).

        ``run_config``: values as the app's ``[tool.flwr.app.config]`` types them (str, int, float,
        bool).  ``echo``: called with every output line of ``flwr run --stream`` while it runs (default:
        none, the output is written to ``flwr_run.log``).
        """
        cfg = self.workdir / "run_config.toml"
        cfg.write_text("".join(f"{json.dumps(str(k))} = {toml_value(v)}\n" for k, v in run_config.items()))
        start = time.monotonic()
        args = ("run", str(self.app_dir), self.connection, "--run-config", str(cfg), *self.federation_config(),
                "--stream")
        if echo is None:
            proc = self._flwr(*args, timeout=timeout)
            output = proc.stdout + proc.stderr
        else:
            output = self._flwr_streamed(*args, echo=echo, timeout=timeout)
        (self.workdir / "flwr_run.log").write_text(output)
        found = re.search(r"started run\D*(\d+)", output)
        if found is None:
            raise RuntimeError(f"flwr run did not start a run:\n{output[-3000:]}")
        run_id = int(found.group(1))
        while True:  # `flwr run --stream` exits 0 even if the ServerApp failed: ask the SuperLink
            status = self.status(run_id)
            if status.startswith("finished"):
                return run_id, status
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"run {run_id} still {status!r} after {timeout:.0f}s")
            time.sleep(1.0)

    def run_info(self, run_id: int) -> dict:
        """The run's entry of ``flwr ls --run-id <id> --format json`` (status, status-details, ...)."""
        proc = self._flwr("ls", self.connection, "--run-id", str(run_id), "--format", "json", timeout=60)
        try:
            return dict(json.loads(proc.stdout)["runs"][0])
        except (ValueError, KeyError, IndexError):
            raise RuntimeError(f"flwr ls failed: {proc.stdout}{proc.stderr}") from None

    def status(self, run_id: int) -> str:
        return str(self.run_info(run_id)["status"])

    def _descendants(self) -> list[int]:
        """PIDs of every process started by ours (e.g. the SuperLink's flower-superexec, which
        runs in its own session), from /proc; empty where /proc does not exist."""
        parent: dict[int, int] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                parent[int(stat.parent.name)] = int(fields[1])
            except (OSError, ValueError, IndexError):
                continue
        found, frontier = [], {p.pid for p in self.processes}
        while frontier:
            children = {pid for pid, ppid in parent.items() if ppid in frontier and pid not in found}
            found += sorted(children)
            frontier = children
        return found

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM every started process group (supernodes first), then SIGKILL what is left: the groups,
        their descendants and every process with this federation's mark (:data:`LAUNCH_MARK`), which
        finds the processes that left our groups and lost their parent too (the ServerApp of a
        SIGKILLed SuperLink is reparented to init)."""
        descendants = self._descendants()
        for proc in reversed(self.processes):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace
        for proc in self.processes:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:  # children (flwr-serverapp / flwr-clientapp) share the group
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        for pid in descendants:  # normally gone already (they watch their parent)
            try:  # guard against PID reuse: only a Flower process
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"flower" in cmd or b"flwr" in cmd:
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ProcessLookupError, PermissionError):
                pass
        marked = self._kill_marked()
        self.stopped_pids = [p.pid for p in self.processes] + descendants + [p for p in marked if p not in descendants]
        self.processes.clear()

    def __enter__(self) -> Federation:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    def logs(self) -> str:
        return "\n".join(f"==== {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.workdir.glob("*.log")))


def toml_value(value) -> str:
    """A node config value as Flower's ``--node-config`` parses it (TOML): strings quoted."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))  # a TOML basic string


def parse_site_config(text: str) -> dict[str, object]:
    """``'max-eps=2 allow-nonprivate=true'`` -> a dict (values as TOML, like Flower's ``--node-config``)."""
    import tomllib

    pairs = re.findall(r"(\S+?)=(\'[^\']*\'|\"[^\"]*\"|\S+)", text)
    try:
        return tomllib.loads("\n".join(f"{k} = {v}" for k, v in pairs))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"site config {text!r}: {exc} (quote strings: ledger-dir=\"/path\")") from None


@dataclass
class LoopbackFederation(Federation):
    """Deployment: a SuperLink + one SuperNode per data file, all on 127.0.0.1 (insecure: loopback only).

    ``site_config``: extra node config keys of every SuperNode (a dict) or of each (a list of
    dicts), e.g. ``{"max-eps": 2.0}`` or ``{"allow-seeded-noise": True}`` (the site policy,
    :mod:`fdp_flower.privacy.site_policy`).  Each SuperNode keeps its site ledger in its own
    ``<workdir>/site-<i>`` unless its config names a ``ledger-dir``.  ``app_pins``: SuperNode ``i`` ->
    the pins of the app bundles its site approved; such a SuperNode runs with ``--isolation process``
    next to the site's launcher ``fdp-flower site-clientapp`` (this package, not the app bundle's), which
    runs only those bundles; the others run Flower's own ``flower-superexec`` (any bundle).
    """

    data_paths: list[Path] = field(default_factory=list)
    site_config: dict | list[dict] = field(default_factory=dict)
    app_pins: dict[int, list[str]] = field(default_factory=dict)
    node_processes: dict[int, subprocess.Popen] = field(default_factory=dict)
    launcher_processes: dict[int, subprocess.Popen] = field(default_factory=dict)
    _node_args: dict[int, list[str]] = field(default_factory=dict, repr=False)

    def node_config(self, i: int) -> dict[str, object]:
        """SuperNode ``i``'s node config."""
        extra = self.site_config[i] if isinstance(self.site_config, list) else self.site_config
        return {"partition-id": i, "num-partitions": len(self.data_paths), "data-path": str(self.data_paths[i]),
                "ledger-dir": str(self.workdir / f"site-{i}"), **extra}

    def ledger_path(self, i: int) -> Path:
        """SuperNode ``i``'s site ledger file."""
        from fdp_flower.privacy.site_policy import SitePolicy

        return SitePolicy.from_node_config(self.node_config(i)).ledger_path(self.env)

    def start(self, timeout: float = 60.0) -> LoopbackFederation:
        if isinstance(self.site_config, list) and len(self.site_config) != len(self.data_paths):
            raise ValueError(f"site_config has {len(self.site_config)} entries for {len(self.data_paths)} nodes")
        (self.workdir / "flwr_home").mkdir(parents=True, exist_ok=True)
        self.link_port = free_port()
        link = self._spawn("superlink", [_bin("flower-superlink"), "--insecure",
                                         "--disable-runtime-dependency-installation", "--port", str(self.link_port)])
        _wait_port(self.link_port, timeout, link)
        for i in range(len(self.data_paths)):
            config = " ".join(f"{k}={toml_value(v)}" for k, v in self.node_config(i).items())
            self._node_args[i] = [_bin("flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{self.link_port}",
                                  "--port", str(free_port()), "--node-config", config,
                                  *(["--isolation", "process"] if i in self.app_pins else [])]
            self.node_processes[i] = self._spawn(f"supernode-{i}", self._node_args[i])
            self._start_launcher(i)
        self._write_connection()
        return self

    def _start_launcher(self, i: int, name: str = "") -> None:
        """SuperNode ``i``'s site launcher, if it has pins: this package's ``fdp-flower site-clientapp`` (found
        through PYTHONPATH first, as a site runs the launcher of its own installation)."""
        if i not in self.app_pins:
            return
        port = self._node_args[i][self._node_args[i].index("--port") + 1]
        args = [sys.executable, "-W", "ignore::DeprecationWarning", "-m", "fdp_flower.cli", "site-clientapp",
                "--runtime-api-address", f"127.0.0.1:{port}", "--insecure",
                *[arg for pin in self.app_pins[i] for arg in ("--pin", pin)]]
        own = str(Path(__file__).resolve().parents[2])
        env = self._marked_env(f"supernode-{i}-launcher")  # stopped with its SuperNode (kill_node, stop)
        env["PYTHONPATH"] = os.pathsep.join([own, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        log = open(self.workdir / f"{name or f'site-clientapp-{i}'}.log", "w")  # noqa: SIM115
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=self.workdir, start_new_session=True)
        log.close()
        self.processes.append(proc)
        self.launcher_processes[i] = proc

    def kill_node(self, i: int) -> None:
        """SIGKILL SuperNode ``i`` and its ClientApp processes (its process group, its site launcher's, then
        every process with its mark) at once."""
        for proc in (self.node_processes[i], self.launcher_processes.get(i)):
            if proc is None:
                continue
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        self._kill_marked(f"supernode-{i}")  # its flower-superexec runs in a session of its own

    def restart_node(self, i: int) -> subprocess.Popen:
        """Start SuperNode ``i`` again with the same node config (its ledger dir included)."""
        if self.node_processes[i].poll() is None:
            raise RuntimeError(f"supernode {i} (PID {self.node_processes[i].pid}) is still running")
        restarts = sum(1 for p in self.workdir.glob(f"supernode-{i}-restart*.log"))
        args = list(self._node_args[i])
        args[args.index("--port") + 1] = str(free_port())  # the old runtime port may linger in TIME_WAIT
        self._node_args[i] = args
        self.node_processes[i] = self._spawn(f"supernode-{i}-restart{restarts + 1}", args)
        self._start_launcher(i, f"site-clientapp-{i}-restart{restarts + 1}")
        return self.node_processes[i]


@dataclass
class SimulationFederation(Federation):
    """Flower's simulation runtime behind a real SuperLink (``flower-superlink --simulation``) with
    ``num_supernodes`` simulated SuperNodes (each simulates several clients when there are more
    clients than SuperNodes).

    Flower 1.41 keeps the simulation settings at the SuperLink, not in ``config.toml`` (its
    ``options.*`` connection fields are deprecated since 1.28): every run passes them with
    ``flwr run ... --federation-config "num-supernodes=N client-resources-num-cpus=C"``.
    """

    num_supernodes: int = 2
    cpus_per_supernode: int = 1

    def federation_config(self) -> list[str]:
        return ["--federation-config", f"num-supernodes={self.num_supernodes} "
                                       f"client-resources-num-cpus={self.cpus_per_supernode}"]

    def start(self, timeout: float = 60.0) -> SimulationFederation:
        if self.num_supernodes < 1:
            raise ValueError(f"the simulation needs at least one SuperNode, got {self.num_supernodes}")
        (self.workdir / "flwr_home").mkdir(parents=True, exist_ok=True)
        self.link_port = free_port()
        self._write_connection()
        link = self._spawn("superlink", [_bin("flower-superlink"), "--insecure", "--simulation",
                                         "--disable-runtime-dependency-installation", "--host", "127.0.0.1",
                                         "--port", str(self.link_port)])
        _wait_port(self.link_port, timeout, link)
        return self


def has_node_local_data(scenario) -> bool:
    """True when each client's data is a node's own file (``data.kind: node_files``): one SuperNode per client."""
    from fdp_flower.functional.sources import SOURCES

    kind = getattr(getattr(scenario, "data", None), "kind", None)
    return kind in SOURCES and bool(SOURCES[kind].node_local)


def check_node_count(scenario, nodes: int, what: str) -> None:
    """On node-local data every SuperNode is one client's site: ``nodes`` (given by the option ``what``) must
    equal the scenario's ``federation.num_clients``; otherwise one :class:`ScenarioError` line naming both,
    before any process starts (the ServerApp would stop in its setup phase, after the federation started)."""
    from fdp_flower.config.base import ScenarioError

    if not has_node_local_data(scenario):
        return
    clients = int(scenario.federation.num_clients)
    if nodes != clients:
        raise ScenarioError(f"{what} {nodes} does not match the scenario's {clients} clients "
                            f"(federation.num_clients): on node-local data (data.kind: node_files) each SuperNode "
                            f"is one client's site; give {clients} SuperNodes or set federation.num_clients={nodes}")


def is_flower_app_dir(path: Path) -> bool:
    """True when ``path`` holds the pyproject.toml with this project's ``[tool.flwr.app]`` section."""
    try:
        return "[tool.flwr.app]" in (Path(path) / "pyproject.toml").read_text()
    except OSError:
        return False


def app_run_config(app_dir: Path = APP_DIR) -> dict[str, object]:
    """The app's run config defaults: ``[tool.flwr.app.config]`` of its pyproject.toml."""
    import tomllib

    with open(Path(app_dir) / "pyproject.toml", "rb") as fh:
        return dict(tomllib.load(fh)["tool"]["flwr"]["app"]["config"])


#: the file of a results directory that holds the whole output of ``flwr run --stream`` (``run_on_simulation``)
FLOWER_LOG = "flower.log"
_LOG_PREFIX = re.compile(r"^(?:\x1b\[[0-9;]*m)?[A-Z]+ ?(?:\x1b\[0m)?\s*:\s{0,6}")


class HideFinalResults:
    """An ``echo`` that passes every line on except Flower's final-results dump: the block a Message-API
    strategy logs after its last round ("Final results:", then every round's metrics again, about 550
    lines for 30 rounds), which repeats what the per-round lines and the results files already hold.
    In its place one line says how many lines were held back and where they are (``where``)."""

    def __init__(self, echo, where: str):
        self.echo, self.where, self.hidden, self.inside = echo, where, 0, False

    def __call__(self, line: str) -> None:
        message = _LOG_PREFIX.sub("", line, count=1)
        if message.strip() == "Final results:":
            self.inside, self.hidden = True, self.hidden + 1
            return
        if self.inside and (message.strip() == "" or message.startswith("\t")):
            self.hidden += 1
            return
        self.close()
        self.echo(line)

    def close(self) -> None:
        """End of a held-back block: say so (once per block)."""
        if self.inside:
            self.inside = False
            self.echo(f"(Flower's final-results dump, {self.hidden} lines, not repeated here: {self.where})")


def run_on_simulation(scenario: str | Path, overrides: list[str], results_dir: str | Path, *,
                      resume: str | None = None, num_supernodes: int = 2, run_config: dict | None = None,
                      echo=print, timeout: float = 3600.0,
                      app_dir: Path = APP_DIR) -> tuple[int, str, Path | None, Path]:
    """Run a scenario file with ``flwr run`` on a SuperLink with Flower's simulation runtime, started
    here and stopped afterwards (``fdp-flower run --engine flower``, ``./run.sh``).

    The SuperLink is our own (a free loopback port, ``FLWR_HOME`` in a new temp dir): a SuperLink
    somebody else runs on this machine is never used.  Returns (run id, the status of that run id from
    ``flwr ls``, the run's results directory or None, the work dir with FLWR_HOME and the process logs --
    removed when the run completed).  ``results_dir`` and ``scenario`` are resolved against the
    caller's working directory here, so the ServerApp (working directory: the work dir) writes where
    the caller expects.  ``run_config``: further typed keys of ``[tool.flwr.app.config]``
    (``num-server-rounds``, ``eps``, ...).  ``resume``: a checkpoint of the same FDP-ADMM scenario to
    continue from.  ``echo`` gets every line of ``flwr run --stream`` but Flower's final-results dump
    (:class:`HideFinalResults`); the whole output is written to ``flower.log`` in the run's results
    directory.
    """
    if not is_flower_app_dir(app_dir):
        raise RuntimeError(f"{app_dir} is not the fdp-flower Flower app (no [tool.flwr.app] in pyproject.toml): "
                           "--engine flower needs a source checkout installed with `pip install -e .`")
    results = Path(results_dir).resolve()
    results.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fdp-flower-sim-"))
    with SimulationFederation(work, app_dir=app_dir, num_supernodes=num_supernodes) as fed:
        echo(f"SuperLink (simulation runtime, {num_supernodes} SuperNodes) on 127.0.0.1:{fed.link_port}, "
             f"PID {fed.processes[0].pid}; logs in {work}")
        quiet = HideFinalResults(echo, f"{FLOWER_LOG} in the results directory")
        try:
            run_id, status = fed.run({**(run_config or {}), "scenario": str(Path(scenario).resolve()),
                                      "overrides": "; ".join(overrides), "results-dir": str(results),
                                      "resume": resume or ""}, timeout=timeout, echo=quiet)
        finally:
            quiet.close()
        if status != "finished:completed":
            details = fed.run_info(run_id).get("status-details", "")
            echo(f"run {run_id} ended {status}: {details}")
            echo(fed.logs())
    found = sorted(results.glob(f"*-run{run_id}"))
    if found and (work / "flwr_run.log").is_file():
        shutil.copyfile(work / "flwr_run.log", found[-1] / FLOWER_LOG)
    if status == "finished:completed":  # the logs are kept only when something went wrong
        shutil.rmtree(work, ignore_errors=True)
    return run_id, status, (found[-1] if found else None), work


def run_demo(scenario: str, *, dataset: str = "paper", nodes: int = 3, overrides: str = "",
             workdir: str | None = None, fmt: str = "npz", n_samples: int = 3000, seed: int = 0,
             site_config: dict | None = None, timeout: float = 3600.0) -> int:
    """Partition ``dataset`` into ``nodes`` files, deploy on loopback, run ``scenario``, print the result.

    ``site_config``: node config keys of every site's policy (e.g. ``{"allow-nonprivate": True}``);
    ``timeout``: seconds the run may take.
    """
    from fdp_flower.algorithms.registry import any_scenario_from_run_config
    from fdp_flower.functional.node_files import load_dataset, partition, write_partitions

    # the ServerApp's own parsing, here first: a bad scenario or a node count that does not match it fails
    # in one line before any process starts
    check_node_count(any_scenario_from_run_config({"scenario": str(Path(scenario).resolve()), "overrides": overrides}),
                     nodes, "--nodes")
    work = Path(workdir or tempfile.mkdtemp(prefix="fdp-deploy-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if dataset == "breast_cancer":  # rows (DP-ADMM / DP-AccADMM, peer-to-peer): an .npz or .csv a node
        from fdp_flower.data.tabular import load_breast_cancer_binary, write_node_rows

        paths = write_node_rows(*load_breast_cancer_binary(), nodes, work / "data", fmt)
    else:
        paths = write_partitions(partition(load_dataset(dataset, seed=seed, n_samples=n_samples), nodes),
                                 work / "data", fmt)
    print(f"data: {len(paths)} node files in {work / 'data'}", flush=True)
    results = work / "results"
    with LoopbackFederation(work, data_paths=paths, site_config=site_config or {}) as fed:
        print(f"SuperLink on 127.0.0.1:{fed.link_port}; {nodes} SuperNodes; PIDs "
              f"{[p.pid for p in fed.processes]}", flush=True)
        run_id, status = fed.run({"scenario": str(Path(scenario).resolve()), "overrides": overrides,
                                  "results-dir": str(results)}, timeout=timeout)
        print(f"run {run_id}: {status}", flush=True)
        if status != "finished:completed":
            print(fed.logs(), file=sys.stderr)
            return 1
    summary = json.loads(next(results.glob("*/summary.json")).read_text())
    print(json.dumps({k: summary[k] for k in ("name", "stop_reason", "rounds_completed", "final",
                                              "final_global_w", "sample_sizes", "evaluation") if k in summary},
                     indent=2))
    from fdp_flower.outputs.results import privacy_headline

    print(privacy_headline(summary["privacy"]) + " [server ledger]")
    for site in summary["privacy"].get("sites", []):
        print(f"site of client {site['client']} reports eps = {site['run_eps']:.4f} in this run, {site['eps']:.4f} "
              f"over its lifetime (max-eps {site['max_eps']:g}) at delta = {site['delta']:g}, {site['neighbouring']}, "
              f"noise from {site['noise_source']}")
    print(f"results and logs: {work}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fdp_flower.engines.flower", description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default=str(APP_DIR / "scenarios" / "deploy_demo.yaml"))
    parser.add_argument("--dataset", default="paper", choices=["paper", "tecator", "breast_cancer"],
                        help="paper, tecator: curves (FDP-ADMM); breast_cancer: rows (DP-ADMM / DP-AccADMM, "
                             "peer-to-peer: --scenario scenarios/deploy_dp_admm.yaml or deploy_p2p.yaml)")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--n-samples", type=int, default=3000, help="paper design: total samples")
    parser.add_argument("--format", default="npz", choices=["npz", "csv", "parquet"])
    parser.add_argument("--set", default="", help='scenario overrides "a.b=1; c.d=2"')
    parser.add_argument("--site-config", default="", help="node config keys of every site's privacy policy, e.g. "
                                                          "'max-eps=4 allow-nonprivate=true' (docs/deployment.md)")
    parser.add_argument("--workdir", help="directory for data, logs and results (default: a new temp dir)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds the run may take (default 3600)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the processes are stopped on SIGTERM too
    try:
        return run_demo(args.scenario, dataset=args.dataset, nodes=args.nodes, overrides=args.set,
                        workdir=args.workdir, fmt=args.format, n_samples=args.n_samples,
                        site_config=parse_site_config(args.site_config), timeout=args.timeout)
    except (ValueError, RuntimeError, TimeoutError) as exc:  # NodeDataError, ScenarioError, run failures
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
