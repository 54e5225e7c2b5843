"""Submitting from a workstation through a login host over ssh, with the agents' telemetry
routed through that login host (the route for compute nodes that cannot reach the
workstation).

The "login host" is 127.0.0.1 through the tests' own sshd (``tests/remote/sshd.py``), which
gives its sessions the test cluster's ``SLURM_CONF``. Every Slurm command then runs over
ssh, the runner listens on loopback only, and the agents reach it through the relay that
the runner's ssh connection runs on the login host. The run spans both nodes and its rank 1
raises: it is named as the first failure, on its node, as on one machine, and each rank's
output is stored under its rank and node.
"""

from __future__ import annotations

import psutil
import pytest

from tests.jobs import start_rankwatch, wait_for
from tests.remote.sshd import LocalSshd, SshdUnavailable
from tests.slurm.helpers import read_store, run_by_profile, runner_env, slurm_run

pytestmark = [pytest.mark.slurm, pytest.mark.ssh, pytest.mark.torchrun]


@pytest.fixture(scope="module")
def login_sshd(slurm_cluster, tmp_path_factory):
    server = LocalSshd(tmp_path_factory.mktemp("login-sshd"), extra_env=slurm_cluster.env)
    try:
        server.start()
    except SshdUnavailable as error:
        server.stop()
        pytest.fail(f"no sshd for the login-host test ({error}); apt-get install openssh-server", pytrace=False)
    yield server
    server.stop()


def test_a_run_submitted_over_ssh_reports_through_the_login_host(slurm_cluster, login_sshd, tmp_path):
    env = runner_env(tmp_path, slurm_cluster, RANKWATCH_SSH_OPTIONS=login_sshd.options)
    del env["SLURM_CONF"]  # only the login host knows the cluster
    runner = start_rankwatch(*slurm_run("fail_rank1.py", workdir=tmp_path, nodes=2,
                                                extra=("--login-host", "127.0.0.1")), env=env)
    run = wait_for(lambda: run_by_profile(tmp_path, "fail_rank1.py"), 60, what="the run to be recorded")
    listening = wait_for(lambda: read_store(tmp_path, lambda store: store.stored_events(run.id, kind="agents_listening")),
                         60, what="the runner to listen")
    listeners = {connection.laddr.ip for connection in psutil.Process(runner.pid).net_connections(kind="tcp")
                 if connection.status == psutil.CONN_LISTEN}
    _stdout, stderr = runner.communicate(timeout=240)
    assert runner.returncode == 1, stderr[-3000:]

    [listening] = listening
    assert listening.fields["route"] == "login" and listeners <= {"127.0.0.1"}
    assert listening.fields["agent_port"] != listening.fields["port"]  # the agents met the relay, not the runner
    submitted = read_store(tmp_path, lambda store: store.stored_events(run.id, kind="slurm_submitted"))
    assert submitted[0].fields["where"] == "on 127.0.0.1"
    summary = stderr[stderr.rindex("── Rankwatch"):]
    hosts = {row.rank: row.host for row in read_store(tmp_path, lambda store: store.ranks(run.id))}
    assert sorted(hosts.values()) == ["n1", "n2"]  # c10d decides which node gets which rank
    assert f"rank 1 on {hosts[1]} failed first (exit code 1): ValueError: bad batch shape on rank 1" in summary
    logs = read_store(tmp_path, lambda store: store.log_lines(run.id))
    joined = {row.line: (row.rank, row.node) for row in logs if row.line.endswith(" joined")}
    assert joined == {"rank 0 joined": (0, hosts[0]), "rank 1 joined": (1, hosts[1])}  # each line, its rank and node
    raised = [row for row in logs if row.line.endswith("ValueError: bad batch shape on rank 1")
              and row.rank is not None]  # torchrun's own report of it has no rank
    assert [(row.rank, row.node, row.stream) for row in raised] == [(1, hosts[1], "stderr")]
    finished = run_by_profile(tmp_path, "fail_rank1.py")
    assert finished.summary["first_failure"]["rank"] == 1 and finished.summary["slurm"]["state"] == "FAILED"
    assert slurm_cluster.job(finished.summary["slurm"]["job_id"])["JobState"] == "FAILED"
