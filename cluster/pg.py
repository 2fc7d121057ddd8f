"""A PostgreSQL primary and its streaming replica, of their own, under one directory.

Used by ``make cluster`` (``cluster/cluster.py``) and by the replica-routing tests
(``tests/db``). Both servers listen on 127.0.0.1 only, on ports given here, with their
Unix sockets in their own data directory: they never touch the machine's PostgreSQL
(5432) or its socket directory.

* the primary: ``initdb`` (trust authentication on loopback, ``wal_level=replica``, a
  replication slot so the replica never falls behind what the primary keeps);
* the replica: ``pg_basebackup -R`` of the running primary (it writes
  ``standby.signal`` and ``primary_conninfo``), started on its own port.

PostgreSQL refuses to run as root: run as root, every server command runs as the
``postgres`` system user (Debian's package makes it), and the directories are given to it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SLOT = "forge_replica"


def bindir() -> Path:
    """The PostgreSQL server binaries: ``PG_BINDIR``, else the newest of Debian's
    ``/usr/lib/postgresql/*/bin``, else the directory of ``initdb`` on PATH."""
    if os.environ.get("PG_BINDIR"):
        return Path(os.environ["PG_BINDIR"])
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4])
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise FileNotFoundError(
        "PostgreSQL server binaries not found (initdb): install Debian's postgresql "
        "package, or set PG_BINDIR"
    )


def _as_server_user() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _give(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")


def _run(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_as_server_user(), *map(str, args)],
        check=check,
        capture_output=True,
        text=True,
        timeout=120,
    )


@dataclass(frozen=True)
class Server:
    """One PostgreSQL server of the cluster: its data directory and port."""

    datadir: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    @property
    def logfile(self) -> Path:
        return self.datadir.parent / f"{self.datadir.name}.log"

    def exists(self) -> bool:
        return (self.datadir / "PG_VERSION").exists()

    def pid(self) -> int | None:
        """The postmaster's pid when it runs (``postmaster.pid`` names a live process)."""
        try:
            pid = int((self.datadir / "postmaster.pid").read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError, PermissionError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid

    def start(self) -> None:
        if self.pid() is not None:
            return
        if not self.logfile.exists():
            self.logfile.touch()
            _give(self.logfile)
        _run(
            bindir() / "pg_ctl",
            "start",
            "-w",
            "-t",
            "60",
            "-D",
            self.datadir,
            "-l",
            self.logfile,
            "-o",
            f"-p {self.port} -c listen_addresses=127.0.0.1 "
            f"-c unix_socket_directories={self.datadir}",
        )

    def stop(self, mode: str = "fast") -> None:
        if self.pid() is None:
            return
        _run(bindir() / "pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", self.datadir)

    def processes(self) -> list[int]:
        """The postmaster and every process it forked (backends, WAL writer, walsender…),
        found by parent pid in /proc: this server's processes and no other's."""
        postmaster = self.pid()
        if postmaster is None:
            return []
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == postmaster:
                children.append(int(stat.parent.name))
        return [postmaster, *children]

    def pause(self, seconds: float) -> int:
        """SIGSTOP the server and all its processes for ``seconds``, then SIGCONT them
        (always, even when interrupted): a stalled primary, as a soak's fault. Returns
        how many processes were paused."""
        stopped: list[int] = []
        try:
            for pid in self.processes():
                try:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(seconds)
        finally:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        return len(stopped)

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        """Run ``sql`` as the superuser and return its unaligned output."""
        done = subprocess.run(
            [
                str(bindir() / "psql"),
                "-X",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                dbname,
                "-c",
                sql,
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.stdout.strip()


def init_primary(datadir: Path, port: int) -> Server:
    """A new primary in ``datadir`` (which must not hold one), started."""
    server = Server(datadir, port)
    datadir.parent.mkdir(parents=True, exist_ok=True)
    datadir.mkdir(mode=0o700)
    _give(datadir)
    _run(
        bindir() / "initdb",
        "-D",
        datadir,
        "-U",
        "postgres",
        "--auth=trust",
        "--encoding=UTF8",
        "--locale=C.UTF-8",
    )
    with (datadir / "postgresql.conf").open("a") as conf:
        conf.write(
            "\n# forge cluster (cluster/pg.py)\n"
            "wal_level = replica\n"
            "max_wal_senders = 5\n"
            "max_replication_slots = 5\n"
            "hot_standby = on\n"
            "max_connections = 200\n"
            "fsync = on\n"
        )
    with (datadir / "pg_hba.conf").open("w") as hba:
        hba.write(
            "local all all trust\n"
            "host all all 127.0.0.1/32 trust\n"
            "host replication all 127.0.0.1/32 trust\n"
        )
    server.start()
    server.psql(f"SELECT pg_create_physical_replication_slot('{SLOT}')")
    return server


def make_replica(primary: Server, datadir: Path, port: int) -> Server:
    """A streaming replica of the running ``primary`` in ``datadir``, started."""
    replica = Server(datadir, port)
    datadir.parent.mkdir(parents=True, exist_ok=True)
    datadir.mkdir(mode=0o700)
    _give(datadir)
    _run(
        bindir() / "pg_basebackup",
        "-h",
        "127.0.0.1",
        "-p",
        str(primary.port),
        "-U",
        "postgres",
        "-D",
        datadir,
        "-R",
        "-X",
        "stream",
        "-S",
        SLOT,
        "-c",
        "fast",
    )
    replica.start()
    return replica


def wait_replayed(primary: Server, replica: Server, *, timeout: float = 30.0) -> None:
    """Return once the replica has replayed everything the primary has written so far."""
    target = primary.psql("SELECT pg_current_wal_lsn()")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = replica.psql(f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn")
        if done == "t":
            return
        time.sleep(0.05)
    raise TimeoutError(f"the replica on {replica.port} did not replay up to {target}")
