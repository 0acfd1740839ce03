"""A real OpenSSH server on a loopback port, with a throwaway host key and login: the machine a
per-host upstream (ssh-mcp) administers in the tests.

``start_ssh_host(work_dir)`` runs ``sshd -D -e -f <its own config>`` (Debian's openssh-server,
which .ci/run installs) on a free port of 127.0.0.1 and returns an :class:`SshHost` once it
listens. Only the client key made for it may log in: no PAM, no password, one user. As root
that user is ``rewind-ssh-test``, created once on the machine (unprivileged, no password, home
``/var/tmp/rewind-ssh-test``); otherwise sshd runs unprivileged and the login is the current
user. Each host gets a folder of its own the login may write (``.workdir``), removed at stop.

``ssh_mcp_config(host, folder)`` writes the config with which ssh-mcp reaches that host.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rewind.lib.processes import Proc, ProcessError, free_port

SSHD = Path("/usr/sbin/sshd")
SSHD_INSTALL = "apt-get install openssh-server (.ci/run does)"
TEST_USER = "rewind-ssh-test"
TEST_HOME = Path("/var/tmp") / TEST_USER
_LISTENING = "Server listening on 127.0.0.1 port "
# sshd as root drops to its privilege separation directory (the systemd unit makes it at boot).
_PRIVSEP_DIR = Path("/run/sshd")


@dataclass
class SshHost:
    """A running sshd: log in as ``user`` on 127.0.0.1:``port`` with the private key ``client_key``.

    ``host_key_fingerprint`` is the server's key as ``ssh-keygen -l`` prints it (``SHA256:…``),
    for a client to pin. ``workdir`` is a folder of the login's, where a test may write.
    """

    proc: Proc
    port: int
    user: str
    client_key: Path
    host_key_fingerprint: str
    workdir: Path
    config: Path

    def stop(self) -> None:
        self.proc.stop(timeout=10)

    def start_again(self) -> None:
        """Start sshd again on the same port and host key (after ``stop``): a rebooted host."""
        assert self.proc.log is not None
        self.proc = _launch(self.config, self.proc.log, self.port)


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )


def _fingerprint(public_key: Path) -> str:
    out = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(public_key)], check=True, capture_output=True, text=True
    ).stdout
    return out.split()[1]


def _test_user() -> pwd.struct_passwd:
    """The unprivileged login of the tests' sshd under root, created on first use.

    Its password field is ``*`` (no password, yet not locked: sshd without PAM refuses an
    account whose field starts with ``!``). A lock file keeps parallel test workers from
    running useradd at once.
    """
    with open("/var/tmp/.rewind-ssh-test.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            user = pwd.getpwnam(TEST_USER)
        except KeyError:
            useradd = ["useradd", "--system", "--user-group", "--shell", "/bin/sh", "--home-dir", str(TEST_HOME)]
            subprocess.run([*useradd, "--password", "*", TEST_USER], check=True, capture_output=True)
            user = pwd.getpwnam(TEST_USER)
        TEST_HOME.mkdir(mode=0o755, exist_ok=True)  # /var/tmp may have been swept since
        os.chown(TEST_HOME, user.pw_uid, user.pw_gid)
    return user


def _login() -> tuple[str, Path]:
    """The user to log in as and a folder of theirs for this host's files."""
    if os.geteuid() != 0:
        return getpass.getuser(), Path(tempfile.mkdtemp(prefix="ssh-host-"))
    user = _test_user()
    workdir = Path(tempfile.mkdtemp(prefix="host-", dir=TEST_HOME))
    os.chown(workdir, user.pw_uid, user.pw_gid)
    workdir.chmod(0o755)
    return user.pw_name, workdir


def _config(user: str, host_key: Path, authorized_keys: Path) -> str:
    lines = [
        "ListenAddress 127.0.0.1",
        f"HostKey {host_key}",
        "PidFile none",
        "UsePAM no",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "AuthenticationMethods publickey",
        f"AuthorizedKeysFile {authorized_keys}",
        f"AllowUsers {user}",
        "PermitRootLogin no",
        # Unprivileged, the keys sit in a temporary folder that need not pass sshd's owner checks.
        f"StrictModes {'yes' if os.geteuid() == 0 else 'no'}",
        "Subsystem sftp internal-sftp",
        "AllowAgentForwarding no",
        "AllowTcpForwarding no",
        "X11Forwarding no",
        "PermitTunnel no",
        "PrintMotd no",
        "PermitUserEnvironment no",
    ]
    return "\n".join(lines) + "\n"


def _launch(config: Path, log: Path, port: int) -> Proc:
    earlier = log.read_text(errors="replace").count(_LISTENING) if log.exists() else 0  # one log for every start
    proc = Proc("sshd", [str(SSHD), "-D", "-e", "-f", str(config), "-p", str(port)], log=log, append=True)
    try:
        proc.wait_for_output(_LISTENING, count=earlier + 1, timeout=30)
    except ProcessError:
        proc.kill()
        raise
    return proc


def start_ssh_host(work_dir: Path) -> SshHost:
    """sshd on a free loopback port with a new host key and client key; returns once it listens."""
    work_dir.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        _PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    user, workdir = _login()
    host_key, client_key = work_dir / "ssh_host_ed25519_key", work_dir / "client_ed25519"
    _keygen(host_key, "rewind test host")
    _keygen(client_key, "rewind test client")
    # sshd reads the authorized keys as the user: in the user's folder, which root owns the file of.
    authorized_keys = workdir / ".authorized_keys"
    authorized_keys.write_text(client_key.with_suffix(".pub").read_text())
    authorized_keys.chmod(0o644)
    config = work_dir / "sshd_config"
    config.write_text(_config(user, host_key, authorized_keys))
    port = free_port()
    proc = _launch(config, work_dir / "sshd.log", port)
    return SshHost(proc, port, user, client_key, _fingerprint(host_key.with_suffix(".pub")), workdir, config)


def ssh_mcp_config(host: SshHost, folder: Path) -> Path:
    """A config of ssh-mcp's (``--config=PATH``) with one profile, ``lab``, for ``host``.

    The login's key, the host key pinned, its folder as working directory. Role ``admin`` on a
    ``dev`` host may run every class of command, and ``approvalPolicy = "auto"`` asks no one:
    ssh-mcp's own approval would ask the client by elicitation, and in front of it the gateway
    is the one that decides. ssh-mcp refuses a config others can read (0600, folder 0700).
    """
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    config = folder / "config.toml"
    config.write_text(
        "\n".join(
            [
                "[defaults]",
                'defaultProfile = "lab"',
                "",
                "[[profiles]]",
                'name = "lab"',
                'host = "127.0.0.1"',
                f"port = {host.port}",
                f'user = "{host.user}"',
                'auth = "key"',
                f'keyRef = "{host.client_key}"',
                f'trustedHostKey = "{host.host_key_fingerprint}"',
                f'workdir = "{host.workdir}"',
                'role = "admin"',
                'group = "dev"',
                'approvalPolicy = "auto"',
            ]
        )
        + "\n"
    )
    config.chmod(0o600)
    return config


@contextlib.contextmanager
def run_ssh_host(work_dir: Path) -> Iterator[SshHost]:
    host = start_ssh_host(work_dir)
    try:
        yield host
    finally:
        host.stop()
        shutil.rmtree(host.workdir, ignore_errors=True)
