"""Real Flower federations on loopback, started and stopped by PID.

:class:`LoopbackFederation`: one SuperLink and N SuperNodes with node-local files (deployment;
the one-command demo ``scripts/deploy_demo.sh`` / ``python -m fdp_flower.engines.flower`` and the
deployment tests).  :class:`SimulationFederation`: a SuperLink running Flower's simulation runtime
(``fdp-flower run --engine flower`` and the Flower end-to-end tests).  Every process is started
in its own process group and stopped by its PID's group (SIGTERM, then SIGKILL), also on
failure.  Nothing here touches a process it did not start.

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
from dataclasses import dataclass, field
from pathlib import Path

from fdp_flower.config.base import APP_DIR

CONNECTION = "loopback"


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

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(FLWR_HOME=str(self.workdir / "flwr_home"), FLWR_TELEMETRY_ENABLED="0",
                   FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1", FLWR_DISABLE_UPDATE_CHECK="1",
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
        return env

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "w")  # noqa: SIM115 (closed right after the spawn)
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=self.env, cwd=self.workdir, start_new_session=True)
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
        return subprocess.run([_bin("flwr"), *args], env=self.env, cwd=self.app_dir, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)

    def _flwr_streamed(self, *args: str, echo, timeout: float) -> str:
        """Run ``flwr`` and pass each output line to ``echo`` as it arrives; returns the whole output."""
        proc = subprocess.Popen([_bin("flwr"), *args], env=self.env, cwd=self.app_dir, stdout=subprocess.PIPE,
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
        """SIGTERM every started process group (supernodes first), then SIGKILL what is left,
        including descendants that left our process groups."""
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
        self.stopped_pids = [p.pid for p in self.processes] + descendants
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
        env = self.env
        env["PYTHONPATH"] = os.pathsep.join([own, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        log = open(self.workdir / f"{name or f'site-clientapp-{i}'}.log", "w")  # noqa: SIM115
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=self.workdir, start_new_session=True)
        log.close()
        self.processes.append(proc)
        self.launcher_processes[i] = proc

    def kill_node(self, i: int) -> None:
        """SIGKILL SuperNode ``i`` and its ClientApp processes (its process group, and its site launcher's) at once."""
        for proc in (self.node_processes[i], self.launcher_processes.get(i)):
            if proc is None:
                continue
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()

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
    continue from.
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
        run_id, status = fed.run({**(run_config or {}), "scenario": str(Path(scenario).resolve()),
                                  "overrides": "; ".join(overrides), "results-dir": str(results),
                                  "resume": resume or ""}, timeout=timeout, echo=echo)
        if status != "finished:completed":
            details = fed.run_info(run_id).get("status-details", "")
            echo(f"run {run_id} ended {status}: {details}")
            echo(fed.logs())
    found = sorted(results.glob(f"*-run{run_id}"))
    if status == "finished:completed":  # the logs are kept only when something went wrong
        shutil.rmtree(work, ignore_errors=True)
    return run_id, status, (found[-1] if found else None), work


def run_demo(scenario: str, *, dataset: str = "paper", nodes: int = 3, overrides: str = "",
             workdir: str | None = None, fmt: str = "npz", n_samples: int = 3000, seed: int = 0,
             site_config: dict | None = None) -> int:
    """Partition ``dataset`` into ``nodes`` files, deploy on loopback, run ``scenario``, print the result.

    ``site_config``: node config keys of every site's policy (e.g. ``{"allow-nonprivate": True}``).
    """
    from fdp_flower.functional.node_files import load_dataset, partition, write_partitions

    work = Path(workdir or tempfile.mkdtemp(prefix="fdp-deploy-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    paths = write_partitions(partition(load_dataset(dataset, seed=seed, n_samples=n_samples), nodes),
                             work / "data", fmt)
    print(f"data: {len(paths)} node files in {work / 'data'}", flush=True)
    results = work / "results"
    with LoopbackFederation(work, data_paths=paths, site_config=site_config or {}) as fed:
        print(f"SuperLink on 127.0.0.1:{fed.link_port}; {nodes} SuperNodes; PIDs "
              f"{[p.pid for p in fed.processes]}", flush=True)
        run_id, status = fed.run({"scenario": str(Path(scenario).resolve()), "overrides": overrides,
                                  "results-dir": str(results)})
        print(f"run {run_id}: {status}", flush=True)
        if status != "finished:completed":
            print(fed.logs(), file=sys.stderr)
            return 1
    summary = json.loads(next(results.glob("*/summary.json")).read_text())
    print(json.dumps({k: summary[k] for k in ("name", "stop_reason", "rounds_completed", "final",
                                              "final_global_w", "sample_sizes")}, indent=2))
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
    parser.add_argument("--dataset", default="paper", choices=["paper", "tecator"])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--n-samples", type=int, default=3000, help="paper design: total samples")
    parser.add_argument("--format", default="npz", choices=["npz", "csv", "parquet"])
    parser.add_argument("--set", default="", help='scenario overrides "a.b=1; c.d=2"')
    parser.add_argument("--site-config", default="", help="node config keys of every site's privacy policy, e.g. "
                                                          "'max-eps=4 allow-nonprivate=true' (docs/deployment.md)")
    parser.add_argument("--workdir", help="directory for data, logs and results (default: a new temp dir)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the processes are stopped on SIGTERM too
    try:
        return run_demo(args.scenario, dataset=args.dataset, nodes=args.nodes, overrides=args.set,
                        workdir=args.workdir, fmt=args.format, n_samples=args.n_samples,
                        site_config=parse_site_config(args.site_config))
    except (ValueError, RuntimeError, TimeoutError) as exc:  # NodeDataError, ScenarioError, run failures
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
