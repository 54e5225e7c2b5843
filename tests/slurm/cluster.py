"""A throwaway Slurm cluster on this machine, so the Slurm tests run against real Slurm.

Debian's packaged daemons (``munge``, ``slurmctld``, ``slurmd``; ``bash .ci/run``
installs them) with everything in one temporary folder: a munge key (1024 random
bytes) and munged's socket, a generated ``slurm.conf``, the state, spool and log
folders, and a job completion file (``jobcomp/filetxt``: Slurm's own record of
every finished job, which the tests compare with Rankwatch's). Clients find the
cluster through ``SLURM_CONF``; the machine's own Slurm configuration, if any, is
never read or touched.

Two nodes from one host (``nodes`` more for the many-node benchmark): the packaged build runs
several ``slurmd`` on one machine (``NodeName=n1/n2``, one ``Port`` each, ``slurmd -N NAME``), each with the
machine's 2 CPUs, so a job can span two "nodes" and jobs can queue behind each
other. ``KillWait`` is short so that cancelled and timed-out jobs end quickly. Job ids
start at a random number: a job's rendezvous port is derived from its id
(``runner.slurm.script``), and two test clusters on one machine (two checkouts tested at
once) counting from 1 put their jobs' torchruns into each other's rendezvous.

``stop`` cancels every job left, waits until Slurm has ended them, and stops the
daemons it started; nothing is left running.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo")
NODES = ("n1", "n2")
"""The nodes of the tests' cluster."""
CPUS_PER_NODE = 2
KILL_WAIT_SECONDS = 10


class SlurmUnavailable(RuntimeError):
    """Slurm cannot run here (the message says what is missing)."""


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free ports. Each probe stays bound until all are taken: a port asked for
    one at a time can come back twice (seen in CI: slurmctld and a slurmd given the same one)."""
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


class LocalSlurm:
    def __init__(self, folder: Path, nodes: int = len(NODES)):
        self.folder = folder
        self.nodes = tuple(f"n{number}" for number in range(1, nodes + 1))
        self.host = socket.gethostname().split(".")[0]
        self.processes: list[subprocess.Popen] = []
        self.munged_pid: int | None = None

    @property
    def conf(self) -> Path:
        return self.folder / "slurm.conf"

    @property
    def jobcomp(self) -> Path:
        return self.folder / "jobcomp.txt"

    @property
    def env(self) -> dict[str, str]:
        """What clients need: ``SLURM_CONF`` (merge into the environment of what runs Slurm commands)."""
        return {"SLURM_CONF": str(self.conf)}

    def start(self) -> None:
        """Raises SlurmUnavailable: a daemon or client is missing, or the cluster did not come up."""
        missing = [name for name in DAEMONS + CLIENTS if shutil.which(name) is None
                   and not Path(f"/usr/sbin/{name}").exists()]
        if missing:
            raise SlurmUnavailable(f"{', '.join(missing)} not installed (apt-get install slurmctld slurmd "
                                   "slurm-client munge; `bash .ci/run` does it)")
        if os.geteuid() != 0:
            raise SlurmUnavailable("slurmd must run as root to start jobs; run the Slurm tests as root")
        for name in ("state", "log", "munge", *(f"spool/{node}" for node in self.nodes)):
            (self.folder / name).mkdir(parents=True, exist_ok=True)
        munge = self.folder / "munge"
        munge.chmod(0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._run([_daemon("munged"), "--force", f"--key-file={key}", f"--socket={munge / 'socket'}",
                   f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
                   f"--seed-file={munge / 'seed'}"])
        self.munged_pid = int((munge / "munged.pid").read_text().split()[0])
        self.conf.write_text(self.config(munge / "socket"))
        self._spawn([_daemon("slurmctld"), "-D", "-f", str(self.conf)], "slurmctld")
        for node in self.nodes:
            self._spawn([_daemon("slurmd"), "-D", "-N", node, "-f", str(self.conf)], f"slurmd-{node}")
        self._wait_idle()

    def config(self, munge_socket: Path) -> str:
        folder = self.folder
        controller_port, *node_ports = _free_ports(1 + len(self.nodes))
        node_lines = [f"NodeName={node} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={port} "
                      f"CPUs={CPUS_PER_NODE} State=UNKNOWN" for node, port in zip(self.nodes, node_ports, strict=True)]
        return "\n".join([
            "ClusterName=rankwatch-test",
            f"SlurmctldHost={self.host}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"SlurmctldPort={controller_port}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={munge_socket}",
            f"StateSaveLocation={folder / 'state'}",
            f"SlurmdSpoolDir={folder / 'spool'}/%n",
            f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
            f"SlurmdPidFile={folder / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={folder / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={folder / 'log' / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self.jobcomp}",
            "JobAcctGatherType=jobacct_gather/none",
            "MpiDefault=none",
            "ReturnToService=2",
            f"KillWait={KILL_WAIT_SECONDS}",
            "MinJobAge=3600",
            f"FirstJobId={random.randrange(1000, 19000)}",
            *node_lines,
            f"PartitionName=debug Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP",
            "",
        ])

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        return subprocess.run(list(command), capture_output=True, text=True, check=check, timeout=30,
                              env={**os.environ, **self.env})

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job``: Slurm's view of the job, as key -> value."""
        from runner.slurm.states import key_values
        return key_values(self.run("scontrol", "-o", "show", "job", job_id).stdout.strip())

    def processes_of(self, job_id: str) -> list[psutil.Process]:
        """Live processes of the job on this machine: every process of a job step (the batch script,
        srun, the tasks and all they started) has the job's id in its environment, and Slurm's own
        step daemons do not. Only this cluster's job (another test cluster's may have the same id)."""
        found = []
        for process in psutil.process_iter():
            try:
                environ = process.environ()
                if environ.get("SLURM_JOB_ID") == job_id and environ.get("SLURM_CONF") == str(self.conf) \
                        and process.status() != psutil.STATUS_ZOMBIE:
                    found.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    def completion_record(self, job_id: str) -> dict[str, str] | None:
        """The job's line in Slurm's job completion file (written when the job ended)."""
        from runner.slurm.states import key_values
        if not self.jobcomp.exists():
            return None
        for line in self.jobcomp.read_text().splitlines():
            fields = key_values(line)
            if fields.get("JobId") == job_id:
                return fields
        return None

    def stop(self) -> None:
        """Cancel what is left, wait for Slurm to end it, stop the daemons."""
        if self.conf.exists() and self.processes:
            jobs = self.run("squeue", "--noheader", "--format=%i", check=False).stdout.split()
            if jobs:
                self.run("scancel", *jobs, check=False)
                deadline = time.monotonic() + KILL_WAIT_SECONDS + 20
                while time.monotonic() < deadline and self.run(
                        "squeue", "--noheader", "--format=%i", check=False).stdout.strip():
                    time.sleep(0.5)
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if self.munged_pid is not None:
            _end_pid(self.munged_pid)
        for process in psutil.process_iter(["name", "cwd"]):  # a job step of ours that outlived slurmd
            if process.info["name"] == "slurmstepd" and str(self.folder) in (process.info["cwd"] or ""):
                process.kill()

    def _run(self, argv: list[str]) -> None:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            raise SlurmUnavailable(f"{Path(argv[0]).name} failed: {result.stderr.strip()[-500:]}")

    def _spawn(self, argv: list[str], name: str) -> None:
        log = open(self.folder / "log" / f"{name}.out", "wb")  # noqa: SIM115 - the daemon writes it for its life
        self.processes.append(subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                               env={**os.environ, **self.env}))

    def _wait_idle(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        states = ""
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise SlurmUnavailable(f"{process.args[0]} exited: see {self.folder / 'log'}")
            result = self.run("sinfo", "--noheader", "--Node", "--format=%N %t", check=False)
            states = result.stdout.strip()
            if result.returncode == 0 and states and all(line.split()[-1] == "idle" for line in states.splitlines()):
                return
            time.sleep(0.3)
        raise SlurmUnavailable(f"the nodes did not become idle within {timeout:.0f} s (sinfo: {states!r})")


def _daemon(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _end_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
