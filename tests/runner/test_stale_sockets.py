"""Sockets that SIGKILLed runners and agents left in the socket folder are removed when the next one
starts; live ones, young ones and other files stay."""

from __future__ import annotations

import os
import socket
import time

from runner import paths


def _socket_file(path, listening: bool) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    if listening:
        server.listen()
    return server


def _age(path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


def test_only_old_sockets_nobody_listens_on_are_removed(tmp_path):
    folder = tmp_path / "sockets"
    folder.mkdir(mode=0o700)
    live = _socket_file(folder / "live.sock", listening=True)
    stale = _socket_file(folder / "out-0123456789ab.sock", listening=False)
    stale.close()  # as a SIGKILLed runner leaves it: the file, nobody behind it
    young = _socket_file(folder / "young.sock", listening=False)
    young.close()  # a runner starting beside this one, between its bind and its listen
    (folder / "notes.sock").write_text("not a socket")
    for name in ("live.sock", "out-0123456789ab.sock", "notes.sock"):
        _age(folder / name, 3600)
    try:
        removed = paths.remove_stale_sockets(folder)
    finally:
        live.close()
    assert removed == [folder / "out-0123456789ab.sock"]
    assert sorted(entry.name for entry in folder.iterdir()) == ["live.sock", "notes.sock", "young.sock"]


def test_a_missing_folder_is_nothing_to_clean(tmp_path):
    assert paths.remove_stale_sockets(tmp_path / "gone") == []
