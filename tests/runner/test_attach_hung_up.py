"""``rankwatch attach`` when the runner hangs up on it before the run ends: it says so and how to
watch again, exit 1 (before, it returned silently with 0)."""

from __future__ import annotations

import asyncio
import sys

from runner import paths
from tests.hubs import open_hub


def test_attach_says_the_runner_stopped_sending_to_it_and_exits_1(tmp_path):
    async def scenario():
        hub, socket_path = await open_hub(tmp_path, store_path=paths.store_path())  # where the CLI looks
        await hub.update_run(socket=str(socket_path))
        cli = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "runner", "attach", str(hub.run_id), "--plain", "--status-every", "0",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        for _ in range(200):  # until the view subscribed
            if hub.publisher.subscribers:
                break
            await asyncio.sleep(0.05)
        subscribed = bool(hub.publisher.subscribers)
        await hub.server.close_all()  # the runner hangs up on the view, no bye: the run goes on
        _out, err = await asyncio.wait_for(cli.communicate(), 30)
        await hub.close()
        return subscribed, cli.returncode, err.decode(), hub.run_id
    subscribed, returncode, err, run_id = asyncio.run(scenario())
    assert subscribed
    assert returncode == 1, err
    assert (f"rankwatch: the runner of run {run_id} stopped sending to this view before the run ended" in err
            and f"`rankwatch attach {run_id}` to watch again" in err), err
    assert "Traceback" not in err
