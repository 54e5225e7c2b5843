"""The login route: agents on compute nodes reach the runner through the login host.

When the compute nodes cannot reach the workstation, the runner (``LoginRelay``)
opens one ssh connection to the login host that

* forwards a private Unix socket there (``ssh -R PATH:127.0.0.1:PORT``; sshd creates
  it with the user's ``StreamLocalBindMask``, 0600 by default) to the runner's
  listener, which listens on loopback only, and
* runs ``python -m runner.slurm.relay`` there, which accepts the agents on the
  login host's address toward the compute nodes (the route toward a node of the
  job's partition) and pipes each connection into that socket, byte for byte.

The relay reads nothing and decides nothing: the runner still refuses any
connection that does not open with the run's token. The relay prints one JSON
line (``{"host": ..., "port": ...}``: where agents connect) and runs until its
stdin ends (the ssh session, and with it the runner, is gone).

Usage on the login host: ``python -m runner.slurm.relay --socket PATH --toward NODE_ADDRESS``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import threading

from runner.launch.process_tree import set_parent_death_signal
from runner.profile.resolve import ResolvedNode
from runner.remote.addresses import HeadAddressError
from runner.remote.ssh import (
    SshOptionsError,
    explain_ssh_failure,
    last_error_line,
    remote_python_command,
    ssh_argv,
)
from runner.slurm.address import source_address_toward
from runner.slurm.client import SlurmToolError

RELAY_MODULE = "runner.slurm.relay"
RELAY_START_SECONDS = 60.0
CHUNK = 65536


def relay_socket_path(run_key: str) -> str:
    """The forwarded socket on the login host (private: only the user can connect)."""
    return f"/tmp/rankwatch-relay-{run_key[:16]}.sock"


class LoginRelay:
    """The runner's side: the ssh connection with the forward, and the relay it runs."""

    def __init__(self, login: ResolvedNode, python: str, run_key: str, listener_port: int):
        self.login = login
        self.python = python
        self.run_key = run_key
        self.listener_port = listener_port
        self.process: asyncio.subprocess.Process | None = None

    def argv(self, toward: str) -> list[str]:
        """Raises SshOptionsError when ``RANKWATCH_SSH_OPTIONS`` is malformed."""
        path = relay_socket_path(self.run_key)
        command = remote_python_command(self.python, ["-m", RELAY_MODULE, "--socket", path, "--toward", toward])
        argv = ssh_argv(self.login, command)
        forward = ["-o", "ExitOnForwardFailure=yes", "-o", "StreamLocalBindUnlink=yes",
                   "-R", f"{path}:127.0.0.1:{self.listener_port}"]
        return [argv[0], *forward, *argv[1:]]

    async def start(self, toward: str) -> tuple[str, int]:
        """Start the relay; returns where agents connect (the login host's address and port).

        Raises:
            SlurmToolError: ssh failed, the forward was refused, or the relay did not start.
        """
        try:
            argv = self.argv(toward)
        except SshOptionsError as error:
            raise SlurmToolError(str(error)) from None
        try:
            process = self.process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True, preexec_fn=set_parent_death_signal)
        except FileNotFoundError:
            raise SlurmToolError("ssh is not installed here; install the OpenSSH client") from None
        assert process.stdout is not None and process.stderr is not None  # both PIPE
        try:
            line = await asyncio.wait_for(process.stdout.readline(), RELAY_START_SECONDS)
        except asyncio.TimeoutError:
            line = b""
        try:
            where = json.loads(line)
            return str(where["host"]), int(where["port"])
        except (ValueError, KeyError, TypeError):
            pass
        await self.stop()
        stderr = (await process.stderr.read()).decode(errors="replace")
        if process.returncode == 255:
            raise SlurmToolError(f"the login route: {explain_ssh_failure(self.login, stderr)}")
        raise SlurmToolError(f"the relay on {self.login.host} did not start: "
                             f"{last_error_line(stderr) or 'no message'} (is Rankwatch installed for "
                             f"{self.python} there, and does its sshd allow forwarding?)")

    async def stop(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        for action in (None, process.terminate, process.kill):
            if action is not None and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    action()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), 5.0)
                return


# ---- the relay itself (on the login host) ---------------------------------------------

async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
    with contextlib.suppress(OSError):
        writer.write_eof()


async def _serve(socket_path: str, host: str) -> None:
    connections: set[asyncio.Task] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_unix_connection(socket_path)
        except OSError:
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None  # a handler runs as a task
        connections.add(task)
        try:
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        finally:
            connections.discard(task)
            writer.close()
            upstream_writer.close()

    server = await asyncio.start_server(handle, host=host, port=0)
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"host": host, "port": port}), flush=True)
    stdin_closed = asyncio.Event()
    loop = asyncio.get_running_loop()

    def watch_stdin() -> None:
        with contextlib.suppress(OSError):
            while os.read(0, 4096):
                pass
        loop.call_soon_threadsafe(stdin_closed.set)

    threading.Thread(target=watch_stdin, name="relay-stdin", daemon=True).start()
    await stdin_closed.wait()
    server.close()
    for task in list(connections):
        task.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runner.slurm.relay",
                                     description="Pipe a Slurm job's agents into the runner's forwarded socket.")
    parser.add_argument("--socket", required=True, help="the Unix socket ssh forwards to the runner")
    parser.add_argument("--toward", required=True, help="a compute node's address: listen on the route toward it")
    args = parser.parse_args(argv)
    try:
        host = source_address_toward(args.toward)
    except HeadAddressError as error:
        print(f"rankwatch relay: {error.message}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(args.socket, host))
    except OSError as error:
        print(f"rankwatch relay: cannot listen on {host}: {error.strerror or error}", file=sys.stderr)
        return 2
    finally:
        with contextlib.suppress(OSError):
            os.unlink(args.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
