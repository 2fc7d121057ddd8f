"""``make cluster`` / ``make cluster-stop``: Forge on 127.0.0.1 the way it scales out.

    python cluster/cluster.py up | down | status
    python cluster/cluster.py restart-daphne N | restart-redis N   (0-based; faults)

What runs (every port configurable by the environment; see docs/deploy.md):

* nginx, the one entry, on ``CLUSTER_PORT`` (8080), proxying HTTP, SSE and WebSocket
  upgrades to the daphnes, least-connections, no sticky sessions;
* ``CLUSTER_DAPHNES`` (3) daphne processes on ``CLUSTER_DAPHNE_PORT`` (8101) and up;
* ``CLUSTER_REDIS_SHARDS`` (2) redis-servers on ``CLUSTER_REDIS_PORT`` (6391) and up:
  channels-redis shards groups over all of them;
* a PostgreSQL primary on ``CLUSTER_PG_PORT`` (5441) and its streaming replica on the
  next port, in ``var/cluster/pg-primary`` and ``var/cluster/pg-replica``.

``CLUSTER_DIR`` moves everything it writes elsewhere than ``var/cluster``.

Every process this script starts has a pid file in ``var/cluster/pids`` (PostgreSQL's
own ``postmaster.pid``); ``down`` stops those processes and nothing else, and checks a
pid still names the command it started before it signals it. ``up`` while the cluster
runs says so and prints the login again; ``up`` on a partly running cluster stops what
is left and starts it whole.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cluster import pg

ROOT = Path(__file__).resolve().parent.parent
# Everything the cluster writes (CLUSTER_DIR: another place, for a test's own cluster).
VAR = Path(os.environ.get("CLUSTER_DIR") or ROOT / "var" / "cluster").resolve()
PIDS = VAR / "pids"
LOGS = VAR / "logs"
BIN = ROOT / ".venv" / "bin"


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


@dataclass(frozen=True)
class Config:
    port: int
    daphnes: int
    daphne_port: int
    redis_shards: int
    redis_port: int
    pg_port: int

    @classmethod
    def from_env(cls) -> Config:
        config = cls(
            port=_env_int("CLUSTER_PORT", 8080),
            daphnes=_env_int("CLUSTER_DAPHNES", 3),
            daphne_port=_env_int("CLUSTER_DAPHNE_PORT", 8101),
            redis_shards=_env_int("CLUSTER_REDIS_SHARDS", 2),
            redis_port=_env_int("CLUSTER_REDIS_PORT", 6391),
            pg_port=_env_int("CLUSTER_PG_PORT", 5441),
        )
        if config.daphnes < 1 or config.redis_shards < 1:
            raise SystemExit("CLUSTER_DAPHNES and CLUSTER_REDIS_SHARDS must be at least 1")
        return config

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def daphne_ports(self) -> list[int]:
        return [self.daphne_port + i for i in range(self.daphnes)]

    @property
    def redis_ports(self) -> list[int]:
        return [self.redis_port + i for i in range(self.redis_shards)]

    @property
    def primary(self) -> pg.Server:
        return pg.Server(VAR / "pg-primary", self.pg_port)

    @property
    def replica(self) -> pg.Server:
        return pg.Server(VAR / "pg-replica", self.pg_port + 1)

    def app_env(self) -> dict[str, str]:
        """The environment of every Forge process of the cluster."""
        env = dict(os.environ)
        env.update(
            DJANGO_SETTINGS_MODULE=env.get("DJANGO_SETTINGS_MODULE", "forge.settings.dev"),
            DATABASE_URL=self.primary.dsn("forge"),
            DATABASE_REPLICA_URL=self.replica.dsn("forge"),
            REDIS_URL=",".join(f"redis://127.0.0.1:{port}/0" for port in self.redis_ports),
            FORGE_ALLOWED_HOSTS="127.0.0.1,localhost",
            PYTHONUNBUFFERED="1",
        )
        return env


# --- processes and their pid files ------------------------------------------------


def _pidfile(name: str) -> Path:
    return PIDS / f"{name}.pid"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (a child of this process that has exited, e.g. when
    the soak started the cluster) is reaped and counts as gone."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass  # not our child
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return bool(_cmdline(pid))  # a zombie has no command line


def running(name: str) -> int | None:
    """The pid of ``name`` when its pid file names a live process running what we started."""
    try:
        pid_text, marker = _pidfile(name).read_text().split("\n", 1)
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    if marker.strip() and marker.strip() not in _cmdline(pid):
        return None  # the pid was reused by something else: never signal it
    return pid if _alive(pid) else None


def spawn(name: str, argv: list[str], *, marker: str, env: dict[str, str] | None = None) -> int:
    """Start ``argv`` in its own session (it outlives this script), logging to LOGS.
    ``marker``: a piece of its command line, checked before it is ever signalled."""
    LOGS.mkdir(parents=True, exist_ok=True)
    PIDS.mkdir(parents=True, exist_ok=True)
    with (LOGS / f"{name}.log").open("ab") as log:
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _pidfile(name).write_text(f"{process.pid}\n{marker}\n")
    return process.pid


def terminate(name: str, *, timeout: float = 15.0) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``; True when it was running."""
    pid = running(name)
    if pid is None:
        _pidfile(name).unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    _pidfile(name).unlink(missing_ok=True)
    return True


def wait_http(url: str, *, timeout: float = 60.0, name: str = "") -> None:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback
                if response.status < 500:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code < 500:
                return
            last = exc
        except OSError as exc:
            last = exc
        if name and _exited(name):
            raise SystemExit(f"{name} exited before it answered:{_log_tail(name)}")
        time.sleep(0.2)
    raise SystemExit(
        f"{name or url} did not answer within {timeout:.0f} s: {last}{_log_tail(name)}"
    )


def _exited(name: str) -> bool:
    """Whether the process ``spawn`` started as ``name`` (a child of this script) has
    exited: reaped, or gone. Not :func:`_alive`, which also wants a command line:
    nginx's master, renaming itself, shows none, and looked gone."""
    try:
        pid = int(_pidfile(name).read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return False
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    except ChildProcessError:
        pass  # not this script's child
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _log_tail(name: str, lines: int = 40) -> str:
    """The end of what ``name`` logged, for a failure's message (a CI pass's daphne that
    never answered left nothing to go on)."""
    try:
        text = (LOGS / f"{name}.log").read_text(errors="replace")
    except OSError:
        return ""
    return "\n--- the end of its log ---\n" + "\n".join(text.splitlines()[-lines:])


# --- the pieces ---------------------------------------------------------------------


def daphne_names(config: Config) -> list[str]:
    return [f"daphne-{port}" for port in config.daphne_ports]


def redis_names(config: Config) -> list[str]:
    return [f"redis-{port}" for port in config.redis_ports]


def start_postgres(config: Config) -> None:
    primary, replica = config.primary, config.replica
    if not primary.exists():
        pg.init_primary(primary.datadir, primary.port)
        primary.psql("CREATE DATABASE forge")
    else:
        primary.start()
    if not replica.exists():
        pg.make_replica(primary, replica.datadir, replica.port)
    else:
        replica.start()


def start_redis(config: Config) -> None:
    for index in range(config.redis_shards):
        start_redis_shard(config, index)


def start_redis_shard(config: Config, index: int) -> None:
    """Start shard ``index`` (0-based) of the Redis shards on its port; empty: the
    shards keep nothing on disk (channel groups and the in-flight mirror are transient)."""
    redis_server = shutil.which("redis-server")
    if redis_server is None:
        raise SystemExit("redis-server not found: apt-get install redis-server")
    name, port = redis_names(config)[index], config.redis_ports[index]
    data = VAR / name
    data.mkdir(parents=True, exist_ok=True)
    spawn(
        name,
        [
            redis_server,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            str(data),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
        ],
        marker=f"127.0.0.1:{port}",  # redis-server's process title
    )


def wait_redis(port: int, *, timeout: float = 20.0) -> None:
    """Return once the Redis on ``port`` answers PING."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"Redis on {port} did not answer within {timeout:.0f} s")


def restart_redis_shard(config: Config, index: int) -> None:
    """Stop shard ``index`` (SIGTERM: what it held is gone, as in a real restart) and
    start it again, empty, on the same port. The soak's fault (bench/soak.py)."""
    terminate(redis_names(config)[index])
    start_redis_shard(config, index)
    wait_redis(config.redis_ports[index])


def manage(config: Config, *args: str) -> str:
    done = subprocess.run(
        [str(BIN / "python"), "manage.py", *args],
        cwd=ROOT,
        env=config.app_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"manage.py {' '.join(args)} failed")
    return done.stdout


def start_daphnes(config: Config) -> None:
    for index in range(config.daphnes):
        start_daphne(config, index, wait=False)
    for name, port in zip(daphne_names(config), config.daphne_ports, strict=True):
        wait_http(f"http://127.0.0.1:{port}/login/", name=name)


def start_daphne(config: Config, index: int, *, wait: bool = True) -> int:
    """Start daphne ``index`` (0-based) on its port; its pid. ``wait``: return once it
    answers HTTP."""
    name, port = daphne_names(config)[index], config.daphne_ports[index]
    pid = spawn(
        name,
        [
            str(BIN / "daphne"),
            # The client's address is nginx's X-Real-IP (which nginx sets, and a client
            # cannot): the sign-in lockout and FORGE_METRICS_ALLOW see the client, not
            # nginx (five wrong passwords from anyone locked a user out for everyone).
            "--proxy-headers",
            "--proxy-headers-host",
            "X-Real-IP",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "forge.asgi:application",
        ],
        marker=f"{port} forge.asgi:application",
        env=config.app_env(),
    )
    if wait:
        wait_http(f"http://127.0.0.1:{port}/login/", name=name)
    return pid


def kill_daphne(config: Config, index: int, *, timeout: float = 10.0) -> bool:
    """``kill -9`` daphne ``index`` (only the pid its pid file names and that still runs
    what we started) and wait until it is gone; True when it was running. Whatever it
    was streaming is left for another process's lease janitor to finalize."""
    name = daphne_names(config)[index]
    pid = running(name)
    if pid is None:
        return False
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    _pidfile(name).unlink(missing_ok=True)
    return True


def restart_daphne(config: Config, index: int, *, down_for: float = 0.0) -> int:
    """``kill -9`` daphne ``index``, wait ``down_for`` seconds, start it again; its new
    pid. The soak's fault (bench/soak.py)."""
    kill_daphne(config, index)
    time.sleep(down_for)
    return start_daphne(config, index)


def nginx_conf(config: Config) -> Path:
    prefix = VAR / "nginx"
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (prefix / "tmp" / sub).mkdir(parents=True, exist_ok=True)
    user_line = ""
    if os.geteuid() == 0:
        # As root nginx's workers would run as nobody: they need its temp directories.
        user_line = "user nobody nogroup;"
        for path in [prefix / "tmp", *(prefix / "tmp").iterdir()]:
            shutil.chown(path, "nobody", "nogroup")
    servers = "\n".join(
        f"        server 127.0.0.1:{port} max_fails=2 fail_timeout=5s;"
        for port in config.daphne_ports
    )
    template = (ROOT / "cluster" / "nginx.conf.template").read_text()
    conf = prefix / "nginx.conf"
    conf.write_text(
        template.format(prefix=prefix, user_line=user_line, servers=servers, port=config.port)
    )
    return conf


def start_nginx(config: Config) -> None:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        raise SystemExit("nginx not found: apt-get install nginx")
    conf = nginx_conf(config)
    prefix = str(conf.parent)
    check = subprocess.run(
        [nginx, "-p", prefix, "-c", str(conf), "-t"], capture_output=True, text=True
    )
    if check.returncode != 0:
        raise SystemExit(f"nginx refused its configuration:\n{check.stderr}")
    spawn("nginx", [nginx, "-p", prefix, "-c", str(conf), "-g", "daemon off;"], marker=prefix)
    wait_http(f"{config.url}nginx-health", name="nginx")
    wait_http(f"{config.url}login/", name="nginx → daphnes")


# --- commands -----------------------------------------------------------------------


def _states(config: Config) -> dict[str, bool]:
    names = ["nginx", *daphne_names(config), *redis_names(config)]
    states = {name: running(name) is not None for name in names}
    states["pg-primary"] = config.primary.pid() is not None
    states["pg-replica"] = config.replica.pid() is not None
    return states


def greeting(config: Config) -> str:
    login = manage(config, "setup_demo", "--url", config.url).strip()
    return (
        f"{login}\n"
        f"Cluster: nginx {config.url} → {config.daphnes} daphnes "
        f"({', '.join(map(str, config.daphne_ports))}), Redis shards on "
        f"{', '.join(map(str, config.redis_ports))}, PostgreSQL primary on "
        f"{config.primary.port} and replica on {config.replica.port}\n"
        f"Logs: {LOGS}/   Stop: make cluster-stop"
    )


def up(config: Config) -> None:
    states = _states(config)
    if all(states.values()):
        print("The cluster is already running.")
        print(greeting(config))
        return
    if any(states.values()):
        up_now = ", ".join(name for name, on in states.items() if on)
        print(f"The cluster is partly running ({up_now}): stopping it to start it whole.")
        down(config)
    VAR.mkdir(parents=True, exist_ok=True)
    print("Starting PostgreSQL (primary and streaming replica)…", flush=True)
    start_postgres(config)
    print(f"Starting {config.redis_shards} Redis shards…", flush=True)
    start_redis(config)
    print("Migrating…", flush=True)
    manage(config, "migrate", "--noinput")
    manage(config, "collectstatic", "--noinput", "--verbosity", "0")
    manage(config, "recover_sessions", "--quiet")
    print(f"Starting {config.daphnes} daphnes…", flush=True)
    start_daphnes(config)
    print("Starting nginx…", flush=True)
    start_nginx(config)
    print(greeting(config))


def down(config: Config) -> None:
    stopped = [name for name in ("nginx", *daphne_names(config)) if terminate(name)]
    stopped += [name for name in redis_names(config) if terminate(name)]
    for server, name in ((config.replica, "pg-replica"), (config.primary, "pg-primary")):
        if server.pid() is not None:
            server.stop()
            stopped.append(name)
    # Pid files of processes that are gone (a kill -9, a reboot) go too.
    if PIDS.exists():
        for stale in PIDS.glob("*.pid"):
            if running(stale.stem) is None:
                stale.unlink()
    print(f"Stopped: {', '.join(stopped)}." if stopped else "The cluster was not running.")


def status(config: Config) -> None:
    for name, on in _states(config).items():
        print(f"{name:16} {'running' if on else 'stopped'}")


def main(argv: list[str]) -> None:
    commands = {"up": up, "down": down, "status": status}
    restarts: dict[str, Callable[[Config, int], object]] = {
        "restart-daphne": restart_daphne,
        "restart-redis": restart_redis_shard,
    }
    if len(argv) == 3 and argv[1] in restarts and argv[2].isdigit():
        config = Config.from_env()
        count = config.daphnes if argv[1] == "restart-daphne" else config.redis_shards
        if int(argv[2]) >= count:
            raise SystemExit(f"{argv[1]}: index {argv[2]} out of range (0..{count - 1})")
        restarts[argv[1]](config, int(argv[2]))
        return
    if len(argv) != 2 or argv[1] not in commands:
        raise SystemExit(f"usage: {argv[0]} up|down|status | restart-daphne N | restart-redis N")
    commands[argv[1]](Config.from_env())


if __name__ == "__main__":
    main(sys.argv)
