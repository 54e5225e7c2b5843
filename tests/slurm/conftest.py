"""A real Slurm cluster on this machine for the Slurm tests (one per session; see ``cluster.py``)."""

from __future__ import annotations

import pytest

from tests.slurm.cluster import LocalSlurm, SlurmUnavailable


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except SlurmUnavailable as error:
        cluster.stop()
        pytest.fail(f"no Slurm for the Slurm tests ({error})", pytrace=False)
    yield cluster
    cluster.stop()


@pytest.fixture
def on_slurm(slurm_cluster, monkeypatch) -> LocalSlurm:
    """Slurm commands run by this test (and the runners it starts) reach the test's cluster."""
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("RANKWATCH_SLURM_POLL_SECONDS", "0.5")
    return slurm_cluster
