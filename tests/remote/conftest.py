"""A real sshd on 127.0.0.1 for the multi-node tests (one per session; see ``sshd.py``)."""

from __future__ import annotations

import pytest

from tests.remote.sshd import LocalSshd, SshdUnavailable


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    server = LocalSshd(tmp_path_factory.mktemp("sshd"))
    try:
        server.start()
    except SshdUnavailable as error:
        server.stop()
        pytest.fail(f"no sshd for the multi-node tests ({error}); install it: apt-get install openssh-server "
                    "(`bash .ci/run` does)", pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def over_ssh(sshd, monkeypatch) -> LocalSshd:
    """Runners started by this test reach the "remote" nodes through the test's sshd."""
    monkeypatch.setenv("RANKWATCH_SSH_OPTIONS", sshd.options)
    return sshd
