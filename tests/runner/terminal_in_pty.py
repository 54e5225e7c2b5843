"""The live terminal view on a real terminal, for ``test_terminal_pty``: a real hub on its socket,
eight fake ranks that speak the real protocol, and ``TerminalView`` drawing its live table on
this process's stdout (a tmux pane). Once the last frame is drawn it writes ``DONE_FILE`` and waits
to be ended (the pane must stay for ``capture-pane``).

Usage: ``python terminal_in_pty.py TMP_DIR DONE_FILE``
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from rankwatch import protocol
from runner.view.terminal import TerminalView
from tests.hubs import hello, open_hub

RANKS = 8
STEPS = 30
FIRST_STEP = 12_340
"""Steps of a run some way in: five digits, as a long run shows them."""


PHASE_SECONDS = {protocol.PHASE_DATA: 0.0004, protocol.PHASE_H2D: 0.0, protocol.PHASE_FORWARD: 0.003,
                 protocol.PHASE_BACKWARD: 0.005, protocol.PHASE_COMM: 0.0021, protocol.PHASE_OPTIMIZER: 0.001,
                 protocol.PHASE_REST: 0.0008, protocol.PHASE_CLOCK: 0}
"""Each step's phases on the CPU's clock, as the bootstrap times a DDP step (comm wait 17%)."""


def loss_of(rank: int, step: int) -> float:
    """Losses as a converging run logs them: 3.509e-03 and the like (nine cells: a squeezed column cut them)."""
    return 3.50912e-3 * (1 + rank / 10) * (1 + 1 / (step + 1))


async def fake_rank(socket_path: Path, rank: int) -> asyncio.StreamWriter:
    """Hello, then a step every 50 ms with what a DDP step measures (loss, step time, data and comm
    wait, throughput) and a key the script logs (``lr``); stays connected."""
    _reader, writer = await asyncio.open_unix_connection(str(socket_path))
    writer.write(hello(rank))
    for index in range(STEPS):
        step, t = FIRST_STEP + index, time.time()
        writer.write(protocol.encode_metric_items(rank, [
            [t, step, protocol.LOSS, loss_of(rank, step), protocol.SOURCE_AUTO],
            [t, step, protocol.STEP_TIME, 0.0123 + rank * 1e-4, protocol.SOURCE_AUTO],
            [t, step, protocol.DATA_WAIT, 0.0004, protocol.SOURCE_AUTO],
            *([t, step, name, seconds, protocol.SOURCE_AUTO] for name, seconds in PHASE_SECONDS.items()),
            [t, step, "lr", 3e-4, protocol.SOURCE_LOG],
            [t, step, protocol.SAMPLES_PER_SECOND, 12_345.6 + rank, protocol.SOURCE_AUTO]]))
        await writer.drain()
        await asyncio.sleep(0.05)
    return writer


async def main(tmp: Path, done_file: Path) -> None:
    hub, socket_path = await open_hub(tmp)
    view = TerminalView()  # stdout is the pane's terminal: the live table
    if not view.live_mode:
        raise SystemExit("stdout is not a terminal: run this in a pty")
    view.start()
    hub.add_local_subscriber(view.handle)
    writers = await asyncio.gather(*(fake_rank(socket_path, rank) for rank in range(RANKS)))
    last = FIRST_STEP + STEPS - 1
    deadline = time.monotonic() + 20  # the hub publishes the last steps (later on a busy machine)
    while time.monotonic() < deadline and not all(
            rank in view.ranks and view.ranks[rank].step == last for rank in range(RANKS)):
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.6)  # the Live redraws a few times (4 a second)
    view.stop()
    done_file.write_text("drawn")
    await asyncio.sleep(60)  # ended by the test once it read the screen
    for writer in writers:
        writer.close()
    await hub.close()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2])))
