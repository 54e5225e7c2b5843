"""A throwaway OpenSSH server on 127.0.0.1, so multi-node tests go over real ssh.

Everything lives in one temporary folder: a host key, a client key, the server's
config (key login only, ``StrictModes no`` because the folder is not a home
directory, listening on 127.0.0.1 only), and a client config that ssh is pointed
at with ``-F`` through ``RANKWATCH_SSH_OPTIONS``. ``-F`` replaces the user's own
configuration for these calls, so the tests neither read nor write ``~/.ssh``.

The client config also passes ``RANKWATCH_HOME`` and ``RANKWATCH_SOCKET_DIR`` to
the "remote" side (``SetEnv``, accepted by this server), so agents keep their
files in the test's folders too.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"
PRIVILEGE_SEPARATION_DIR = Path("/run/sshd")
HOST_KEY_ALIAS = "rankwatch-test-sshd"


class SshdUnavailable(RuntimeError):
    """sshd cannot run here (the message says what is missing)."""


class LocalSshd:
    def __init__(self, folder: Path, extra_env: dict[str, str] | None = None):
        self.folder = folder
        self.extra_env = dict(extra_env or {})
        """More variables the "remote" side gets (the Slurm tests pass ``SLURM_CONF``)."""
        self.port: int | None = None
        self.process: subprocess.Popen | None = None
        self.node_home = folder / "node-home"
        self.node_sockets = Path(os.path.join("/tmp", f"rw-node-{os.getpid()}"))

    @property
    def client_config(self) -> Path:
        return self.folder / "ssh_config"

    @property
    def options(self) -> str:
        """The value for ``RANKWATCH_SSH_OPTIONS``."""
        return f"-F {self.client_config}"

    def start(self) -> None:
        """Generate keys and configs, start sshd, and wait until it accepts connections.

        Raises:
            SshdUnavailable: OpenSSH is not installed, or /run/sshd is missing and cannot be made.
        """
        if not os.access(SSHD, os.X_OK) or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
            raise SshdUnavailable("OpenSSH is not installed (apt-get install openssh-server openssh-client; .ci/setup does it)")
        if not PRIVILEGE_SEPARATION_DIR.is_dir():
            try:
                PRIVILEGE_SEPARATION_DIR.mkdir(mode=0o755, parents=True)
            except OSError as error:
                raise SshdUnavailable(f"sshd needs {PRIVILEGE_SEPARATION_DIR} ({error.strerror}): "
                                      f"sudo mkdir -p {PRIVILEGE_SEPARATION_DIR}") from None
        self.folder.mkdir(parents=True, exist_ok=True)
        self.node_home.mkdir(exist_ok=True)
        self.node_sockets.mkdir(mode=0o700, exist_ok=True)
        host_key, client_key = self.folder / "host_key", self.folder / "client_key"
        for key in (host_key, client_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rankwatch-test", "-f", str(key)],
                           check=True, capture_output=True)
        (self.folder / "authorized_keys").write_text((self.folder / "client_key.pub").read_text())
        (self.folder / "known_hosts").write_text(f"{HOST_KEY_ALIAS} {(self.folder / 'host_key.pub').read_text()}")
        self.port = _free_port()
        (self.folder / "sshd_config").write_text("\n".join([
            f"Port {self.port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {host_key}",
            f"PidFile {self.folder / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.folder / 'authorized_keys'}",
            "StrictModes no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "UsePAM no",
            "AcceptEnv RANKWATCH_HOME RANKWATCH_SOCKET_DIR " + " ".join(self.extra_env),
            "LogLevel ERROR",
            "",
        ]))
        self.client_config.write_text("\n".join([
            "Host *",
            f"  Port {self.port}",
            f"  User {getpass.getuser()}",
            f"  IdentityFile {client_key}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {self.folder / 'known_hosts'}",
            "  GlobalKnownHostsFile /dev/null",
            f"  HostKeyAlias {HOST_KEY_ALIAS}",
            "  StrictHostKeyChecking yes",
            f"  SetEnv RANKWATCH_HOME={self.node_home} RANKWATCH_SOCKET_DIR={self.node_sockets} "
            + " ".join(f"{key}={value}" for key, value in self.extra_env.items()),
            "  LogLevel ERROR",
            "",
        ]))
        log = open(self.folder / "sshd.log", "wb")  # noqa: SIM115 - sshd writes it for its whole life
        self.process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.folder / "sshd_config")],
                                        stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SshdUnavailable(f"sshd exited: {(self.folder / 'sshd.log').read_text()[-500:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise SshdUnavailable("sshd did not start listening within 10 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.node_sockets, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
