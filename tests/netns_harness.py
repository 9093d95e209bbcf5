"""A deployment spread over Linux network namespaces, with an emulated wide-area network.

:class:`NetnsFederation` runs the SuperLink and every SuperNode in its own network namespace, as
separate machines would: each SuperNode dials the SuperLink's public address over its own veth link,
with TLS (a CA and a server certificate made here) and node authentication (an SSH-format ECDSA
P-384 key pair per site, made by ``ssh-keygen -t ecdsa -b 384`` as docs/deployment.md, section 7,
says, and registered with ``flwr supernode register``).  Used by tests/test_netns_deployment.py and
by ``benchmarks/scaling.py --netns``.

The network (no process here touches the host's own interfaces or routes)::

    site<i> ns: 10.98.<i+1>.2/24 --veth-- wan ns: 10.98.<i+1>.1/24
                (default route via the wan ns)    10.97.0.1/32 (the SuperLink's public address)
                                                   10.98.0.1/24 --veth-- link ns: 10.98.0.2/24

The wan namespace does not forward IP packets (a new namespace's ``ip_forward`` is 0), so a site
reaches the SuperLink only through :class:`WanRelay`, a TCP relay listening on the public address in
the wan namespace, which forwards every connection to the SuperLink's own address and emulates the
site's wide-area link (the kernels this runs on have no ``netem`` qdisc):

- **latency**: every chunk read from one side is written to the other ``delay_s`` later (default 50
  ms one way, i.e. 100 ms added to every round trip, TLS and HTTP requests included);
- **loss**: TCP does not lose data above the socket, so loss is emulated as what it costs TCP: a
  chunk is cut into segments of one MSS (1448 bytes) and each segment is "lost" with probability
  ``loss`` (default 1%, drawn from a seeded ``np.random.Generator``); a chunk with k lost segments is
  delivered ``k x rto_s`` later (default 200 ms, Linux's minimum retransmission timeout), and since
  the relay keeps the byte order, everything behind it waits too (head-of-line blocking), as on a real
  connection;
- **bandwidth** (optional, ``rate_mbit``): a chunk occupies the site's link (each direction apart, all
  of the site's connections together) for its size over the rate.

The relay terminates TCP on both sides, so the kernel's own flow control runs between each party and
the relay, not end to end: the emulation does not limit a transfer by the bandwidth-delay product.
TLS goes end to end through it (the relay never sees clear text; it counts the connections whose
first byte is a TLS handshake record).  :meth:`WanRelay.cut` cuts one site off (its connections reset,
new ones refused) until :meth:`WanRelay.restore`.

:func:`netns_unavailable` says why namespaces cannot be made here (not root, no ``ip``, no
permission), for a test to skip with that reason.  Every namespace, process and relay is removed by
:meth:`NetnsFederation.stop`, also on failure.
"""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import datetime
import ipaddress
import itertools
import math
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fdp_flower.engines.flower import LoopbackFederation, _bin, toml_value

#: the SuperLink's public address (in the wan namespace, where the relay listens) and its own address
PUBLIC_IP = "10.97.0.1"
LINK_IP, LINK_GATEWAY = "10.98.0.2", "10.98.0.1"
LINK_PORT = 9093
#: a TLS record of type handshake starts every TLS connection
TLS_HANDSHAKE = 0x16
#: one TCP segment's payload on a 1500-byte Ethernet link (IPv4 and TCP headers with timestamps)
MSS = 1448
NETNS_DIR = Path("/var/run/netns")
CLONE_NEWNET = 0x40000000
_counter = itertools.count()


def site_ip(i: int) -> str:
    """Site ``i``'s own address (its end of its veth link to the wan namespace)."""
    return f"10.98.{i + 1}.2"


def netns_unavailable() -> str | None:
    """Why network namespaces cannot be made on this machine, or None when they can."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux, this is {sys.platform}"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add); run the test as root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"fdpprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip() or made.returncode}"
    try:
        veth = subprocess.run(["ip", "-n", probe, "link", "add", "name", "probe0", "type", "veth", "peer", "name", "probe1"],
                              capture_output=True, text=True, check=False)
        if veth.returncode != 0:
            return f"cannot make a veth pair: {veth.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


def _setns(name: str) -> None:
    """Move the calling thread into network namespace ``name`` (sockets it makes from then on live there)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(NETNS_DIR / name, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


def call_in_netns(name: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a new thread that lives in namespace ``name``; returns its result."""
    box: dict = {}

    def target():
        try:
            _setns(name)
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 (re-raised in the caller)
            box["error"] = exc
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def wait_listening(netns: str, host: str, port: int, timeout: float, proc: subprocess.Popen) -> None:
    """Until something accepts on ``host:port`` in namespace ``netns`` (or ``proc`` exits)."""
    def probe() -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            return s.connect_ex((host, port)) == 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process {proc.pid} exited with code {proc.returncode} before listening on {port}")
        if call_in_netns(netns, probe):
            return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {host}:{port} in {netns} after {timeout:.0f}s")


# --------------------------------------------------------------------------------------- the relay
@dataclass(frozen=True)
class LinkProfile:
    """One site's emulated wide-area link: one-way ``delay_s`` per chunk, ``loss`` per MSS segment
    (each lost segment costs ``rto_s``), optional ``rate_mbit`` (None: unlimited)."""

    delay_s: float = 0.05
    loss: float = 0.01
    rto_s: float = 0.2
    rate_mbit: float | None = None

    def __post_init__(self):
        if self.delay_s < 0 or not 0 <= self.loss < 1 or self.rto_s < 0:
            raise ValueError(f"link profile: delay_s >= 0, 0 <= loss < 1, rto_s >= 0; got {self}")
        if self.rate_mbit is not None and self.rate_mbit <= 0:
            raise ValueError(f"link profile: rate_mbit must be positive or None, got {self.rate_mbit}")


@dataclass
class LinkStats:
    """What the relay carried for one site (both directions)."""

    connections: int = 0
    tls_connections: int = 0
    refused: int = 0
    chunks: int = 0
    bytes: int = 0
    segments: int = 0
    lost_segments: int = 0


class WanRelay:
    """A TCP relay in namespace ``netns``: accepts on ``listen`` (host, port), forwards each connection
    to ``upstream`` with the :class:`LinkProfile` of its source address (``profiles``: source IP ->
    (site name, profile)); a source not in ``profiles`` is refused.  Runs an asyncio loop in its own
    thread (:meth:`start`, :meth:`stop`); ``seed`` seeds every connection's loss draws."""

    def __init__(self, netns: str, listen: tuple[str, int], upstream: tuple[str, int],
                 profiles: dict[str, tuple[str, LinkProfile]], seed: int = 0):
        self.netns, self.listen, self.upstream, self.profiles, self.seed = netns, listen, upstream, profiles, seed
        self.stats: dict[str, LinkStats] = {name: LinkStats() for name, _ in profiles.values()}
        self._cut: set[str] = set()
        self._live: dict[str, set[asyncio.StreamWriter]] = {name: set() for name in self.stats}
        self._links: dict[str, tuple[_LinkState, _LinkState]] = {}
        self._conn_ids = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"wan-relay-{netns}", daemon=True)
        self._error: BaseException | None = None

    def start(self, timeout: float = 10.0) -> WanRelay:
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            raise RuntimeError(f"the WAN relay did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(10)

    def cut(self, site: str) -> None:
        """Cut ``site`` off: reset its open connections and refuse new ones until :meth:`restore`."""
        def do():
            self._cut.add(site)
            for writer in list(self._live[site]):
                writer.transport.abort()
        self._loop.call_soon_threadsafe(do)

    def restore(self, site: str) -> None:
        self._loop.call_soon_threadsafe(self._cut.discard, site)

    # -- inside the relay's thread
    def _main(self) -> None:
        try:
            _setns(self.netns)
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # noqa: BLE001 (reported by start)
            self._error = exc
            self._ready.set()
        finally:
            if self._loop is not None:
                self._loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._handle, *self.listen, reuse_address=True)
        self._ready.set()
        async with server:
            await self._stopping.wait()
        for writers in self._live.values():
            for writer in list(writers):
                writer.transport.abort()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        source = writer.get_extra_info("peername")[0]
        site, profile = self.profiles.get(source, (None, None))
        if site is None or site in self._cut:
            if site is not None:
                self.stats[site].refused += 1
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        stats, conn = self.stats[site], next(self._conn_ids)
        stats.connections += 1
        self._live[site] |= {writer, up_writer}
        up, down = self._links.setdefault(site, (_LinkState(), _LinkState()))  # the site's link, each direction
        try:
            await asyncio.gather(
                self._pump(reader, up_writer, profile, np.random.default_rng([self.seed, conn, 0]), stats, up,
                           first=True),
                self._pump(up_reader, writer, profile, np.random.default_rng([self.seed, conn, 1]), stats, down))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (writer, up_writer):
                self._live[site].discard(w)
                w.transport.abort()

    @staticmethod
    async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, profile: LinkProfile,
                    rng: np.random.Generator, stats: LinkStats, link: _LinkState, first: bool = False) -> None:
        """Copy ``src`` to ``dst``, each chunk delivered at its emulated arrival time, in order."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue(maxsize=256)

        async def deliver():
            while True:
                item = await queue.get()
                if item is None:
                    if dst.can_write_eof():
                        dst.write_eof()
                    return
                at, data = item
                if (wait := at - loop.time()) > 0:
                    await asyncio.sleep(wait)
                dst.write(data)
                await dst.drain()
        delivering = asyncio.ensure_future(deliver())
        last = 0.0
        try:
            while data := await src.read(65536):
                if first:
                    stats.tls_connections += data[0] == TLS_HANDSHAKE
                    first = False
                now = loop.time()
                segments = math.ceil(len(data) / MSS)
                lost = int(rng.binomial(segments, profile.loss)) if profile.loss > 0 else 0
                sent = now
                if profile.rate_mbit is not None:  # the site's link carries one chunk after the other, each way
                    sent = link.busy_until = max(link.busy_until, now) + len(data) * 8 / (profile.rate_mbit * 1e6)
                last = max(last, sent + profile.delay_s + lost * profile.rto_s)  # never overtakes a chunk
                stats.chunks, stats.bytes = stats.chunks + 1, stats.bytes + len(data)
                stats.segments, stats.lost_segments = stats.segments + segments, stats.lost_segments + lost
                await queue.put((last, data))
            await queue.put(None)
            await delivering
        finally:
            delivering.cancel()


@dataclass
class _LinkState:
    """One direction of a site's emulated link: when it has sent everything queued so far."""

    busy_until: float = 0.0


# --------------------------------------------------------------------------------------- TLS and keys
def make_tls(directory: Path, ips: list[str], dns: list[str]) -> tuple[Path, Path, Path]:
    """A self-signed CA and a server certificate naming ``ips`` and ``dns`` (subjectAltName), signed by
    it, as PEM files in ``directory``: returns (ca.crt, server.pem, server.key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, server_key = ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fdp-flower test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA384()))
    san = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns[0])])).issuer_name(ca_name)
              .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
              .add_extension(x509.SubjectAlternativeName(san), critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .add_extension(x509.SubjectKeyIdentifier.from_public_key(server_key.public_key()), critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
              .sign(ca_key, hashes.SHA384()))
    paths = directory / "ca.crt", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    paths[2].chmod(0o600)
    return paths


def make_node_key(directory: Path, name: str) -> tuple[Path, Path]:
    """Site ``name``'s authentication key pair as docs/deployment.md (section 7) makes it:
    ``ssh-keygen -t ecdsa -b 384 -N "" -f <name>.key`` (OpenSSH private key, ``<name>.key.pub``).
    Without ssh-keygen, the same formats from the ``cryptography`` package."""
    directory.mkdir(parents=True, exist_ok=True)
    private, public = directory / f"{name}.key", directory / f"{name}.key.pub"
    if shutil.which("ssh-keygen"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-C", name, "-f", str(private)],
                       check=True, capture_output=True, stdin=subprocess.DEVNULL)
        return private, public
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP384R1())
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                          serialization.NoEncryption()))
    private.chmod(0o600)
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                     serialization.PublicFormat.OpenSSH) + f" {name}\n".encode())
    return private, public


# --------------------------------------------------------------------------------------- the federation
@dataclass
class NetnsFederation(LoopbackFederation):
    """A SuperLink and one SuperNode per data file, each in its own network namespace, every SuperNode's
    connection through :class:`WanRelay` with ``profile`` (or ``profiles[i]``), TLS and node
    authentication on.  ``site_config`` and the node configs are :class:`LoopbackFederation`'s.

    ``flwr`` commands (run, ls, supernode register) run in the SuperLink's namespace, as the operator
    on the SuperLink host would; ``tmpdir``: TMPDIR of every Flower process (a tmpfs speeds up the
    ClientApp's per-message bundle extraction, docs/deployment.md).
    """

    profile: LinkProfile = field(default_factory=LinkProfile)
    profiles: list[LinkProfile] | None = None
    relay_seed: int = 0
    tmpdir: str | None = None
    prefix: str = ""
    namespaces: list[str] = field(default_factory=list)
    relay: WanRelay | None = None
    node_ids: dict[int, int] = field(default_factory=dict)

    def __post_init__(self):
        self.prefix = self.prefix or f"fdpnet{os.getpid()}x{next(_counter)}"
        self.connection = "wan"

    @property
    def wan_ns(self) -> str:
        return f"{self.prefix}-wan"

    @property
    def link_ns(self) -> str:
        return f"{self.prefix}-link"

    def site_ns(self, i: int) -> str:
        return f"{self.prefix}-site{i}"

    @property
    def env(self) -> dict[str, str]:
        env = super().env
        if self.tmpdir:
            env["TMPDIR"] = self.tmpdir
        return env

    def _command(self, name: str, args: list[str]) -> list[str]:
        """Every process runs in its party's namespace: a SuperNode in its site's, the rest in the SuperLink's."""
        if name.startswith("supernode-"):
            return ["ip", "netns", "exec", self.site_ns(int(name.split("-")[1])), *args]
        return ["ip", "netns", "exec", self.link_ns, *args]

    def _ip(self, *args: str) -> None:
        proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")

    def _add_ns(self, name: str) -> None:
        self._ip("netns", "add", name)
        self.namespaces.append(name)
        self._ip("-n", name, "link", "set", "dev", "lo", "up")

    def _build_network(self) -> None:
        n = len(self.data_paths)
        if not 1 <= n <= 250:
            raise ValueError(f"1 to 250 SuperNodes, got {n}")
        for name in (self.wan_ns, self.link_ns, *(self.site_ns(i) for i in range(n))):
            self._add_ns(name)
        self._ip("-n", self.wan_ns, "addr", "add", f"{PUBLIC_IP}/32", "dev", "lo")
        links = [(self.link_ns, "link", LINK_IP, LINK_GATEWAY)]
        links += [(self.site_ns(i), f"site{i}", site_ip(i), f"10.98.{i + 1}.1") for i in range(n)]
        for ns, wan_end, own, gateway in links:
            self._ip("link", "add", "name", wan_end, "netns", self.wan_ns, "type", "veth", "peer", "name", "wan", "netns", ns)
            self._ip("-n", self.wan_ns, "addr", "add", f"{gateway}/24", "dev", wan_end)
            self._ip("-n", ns, "addr", "add", f"{own}/24", "dev", "wan")
            self._ip("-n", self.wan_ns, "link", "set", "dev", wan_end, "up")
            self._ip("-n", ns, "link", "set", "dev", "wan", "up")
            if ns != self.link_ns:
                self._ip("-n", ns, "route", "add", "default", "via", gateway)

    def _write_connection(self) -> None:
        (self.workdir / "flwr_home" / "config.toml").write_text(
            f'[superlink]\ndefault = "{self.connection}"\n\n[superlink.{self.connection}]\n'
            f'address = "{LINK_IP}:{LINK_PORT}"\nroot-certificates = "{self.tls[0]}"\n')

    def start(self, timeout: float = 60.0) -> NetnsFederation:
        if (reason := netns_unavailable()) is not None:
            raise RuntimeError(reason)
        n = len(self.data_paths)
        profiles = self.profiles or [self.profile] * n
        if len(profiles) != n:
            raise ValueError(f"{len(profiles)} link profiles for {n} SuperNodes")
        (self.workdir / "flwr_home").mkdir(parents=True, exist_ok=True)
        self._build_network()
        self.tls = make_tls(self.workdir / "tls", [PUBLIC_IP, LINK_IP, "127.0.0.1"], ["superlink.fdp.test", "localhost"])
        self.keys = [make_node_key(self.workdir / "keys", f"site{i}") for i in range(n)]
        self.link_port = LINK_PORT
        self._write_connection()
        link = self._spawn("superlink", [
            _bin("flower-superlink"), "--ssl-ca-certfile", str(self.tls[0]), "--ssl-certfile", str(self.tls[1]),
            "--ssl-keyfile", str(self.tls[2]), "--enable-supernode-auth", "--host", "0.0.0.0",
            "--port", str(LINK_PORT), "--disable-runtime-dependency-installation"])
        wait_listening(self.link_ns, LINK_IP, LINK_PORT, timeout, link)
        for i, (_private, public) in enumerate(self.keys):
            self.node_ids[i] = self.register(public)
        self.relay = WanRelay(self.wan_ns, (PUBLIC_IP, LINK_PORT), (LINK_IP, LINK_PORT),
                              {site_ip(i): (f"site{i}", profiles[i]) for i in range(n)}, seed=self.relay_seed).start()
        for i in range(n):
            config = " ".join(f"{k}={toml_value(v)}" for k, v in self.node_config(i).items())
            self._node_args[i] = [_bin("flower-supernode"), "--superlink", f"{PUBLIC_IP}:{LINK_PORT}",
                                  "--root-certificates", str(self.tls[0]),
                                  "--auth-supernode-private-key", str(self.keys[i][0]),
                                  "--port", "9094", "--node-config", config]
            self.node_processes[i] = self._spawn(f"supernode-{i}", self._node_args[i])
        return self

    def register(self, public_key: Path) -> int:
        """``flwr supernode register <key.pub> <connection> --format json`` (the operator): the node id."""
        import json

        proc = self._flwr("supernode", "register", str(public_key), self.connection, "--format", "json", timeout=60)
        try:
            return int(json.loads(proc.stdout)["node-id"])
        except (ValueError, KeyError):
            raise RuntimeError(f"flwr supernode register {public_key.name} failed: {proc.stdout}{proc.stderr}") from None

    def restart_node(self, i: int) -> subprocess.Popen:
        """Start SuperNode ``i`` again in its namespace (same key, same node config)."""
        if self.node_processes[i].poll() is None:
            raise RuntimeError(f"supernode {i} (PID {self.node_processes[i].pid}) is still running")
        restarts = sum(1 for _ in self.workdir.glob(f"supernode-{i}-restart*.log"))
        self.node_processes[i] = self._spawn(f"supernode-{i}-restart{restarts + 1}", self._node_args[i])
        return self.node_processes[i]

    def restart_node_until_accepted(self, i: int, *, retry_after: float = 5.0, timeout: float = 300.0) -> int:
        """Restart SuperNode ``i`` as a site's service manager would (e.g. systemd ``Restart=on-failure``):
        again ``retry_after`` s after each failed start, until the SuperLink accepts it; returns the number
        of starts.  With node authentication the SuperLink refuses a node whose key is still online -- a
        crashed SuperNode's until it missed two heartbeats (60 s with Flower's default 30 s interval) --
        and the refused SuperNode exits (code 305, "Failed to activate SuperNode")."""
        deadline, starts = time.monotonic() + timeout, 0
        while time.monotonic() < deadline:
            proc, starts = self.restart_node(i), starts + 1
            log = self.workdir / f"supernode-{i}-restart{sum(1 for _ in self.workdir.glob(f'supernode-{i}-restart*.log'))}.log"
            while proc.poll() is None and time.monotonic() < deadline:
                if "SuperNode ID:" in log.read_text(errors="replace"):
                    return starts
                time.sleep(0.2)
            self._kill_marked(log.stem)  # its superexec, which outlives a refused SuperNode for a while
            time.sleep(retry_after)
        raise TimeoutError(f"supernode {i} not accepted again after {starts} starts in {timeout:.0f}s")

    def stop(self, grace: float = 10.0) -> None:
        """Stop every process (LoopbackFederation.stop), then the relay, then delete the namespaces."""
        try:
            super().stop(grace)
        finally:
            if self.relay is not None:
                self.relay.stop()
            for name in reversed(self.namespaces):
                with contextlib.suppress(RuntimeError):
                    self._ip("netns", "del", name)
            self.namespaces.clear()
