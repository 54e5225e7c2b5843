"""Record real faulthandler dumps of ranks stuck in typical places: ``python tests/diagnosis/data/record_dumps.py``.

Each scenario is a small program run in the test interpreter with the worker's
stack handler installed (``rankwatch._stacks``); once it is stuck it is signalled,
and the main thread's dump is written to ``faulthandler_<name>.txt`` here. The
stack-place tests read them (``tests/diagnosis/test_stack_places.py``). About
20 s; nothing here runs during the tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from rankwatch._stacks import STACK_SIGNAL  # noqa: E402
from runner.diagnosis.stack_dumps import last_dump  # noqa: E402
from runner.paths import WORKER_PATH  # noqa: E402

DATA = Path(__file__).resolve().parent

PRELUDE = """
import os, sys, time
sys.path.insert(0, {worker!r})
from rankwatch._stacks import install_stack_dumps
install_stack_dumps({folder!r}, 0)
"""

SCENARIOS = {
    "data_loader": """
        import torch
        from torch.utils.data import DataLoader, Dataset

        class SlowDataset(Dataset):
            def __len__(self):
                return 4

            def __getitem__(self, index):
                print("ready", flush=True)
                time.sleep(60)  # a slow disk
                return torch.zeros(2)

        for batch in DataLoader(SlowDataset(), batch_size=2):
            pass
    """,
    "backward": """
        import torch

        class Slow(torch.autograd.Function):
            @staticmethod
            def forward(context, x):
                return x * 2

            @staticmethod
            def backward(context, grad):
                print("ready", flush=True)
                time.sleep(60)
                return grad * 2

        x = torch.ones(2, requires_grad=True)
        Slow.apply(x).sum().backward()
    """,
    "init": """
        import datetime
        import torch.distributed as dist
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["FREE_PORT"])
        print("ready", flush=True)
        dist.init_process_group("gloo", rank=0, world_size=2, timeout=datetime.timedelta(seconds=60))
    """,
    "spawn": """
        import torch.multiprocessing as mp

        def worker(index):
            time.sleep(60)

        if __name__ == "__main__":
            print("ready", flush=True)
            mp.spawn(worker, nprocs=1)
    """,
}


def record(name: str, code: str) -> None:
    folder = tempfile.mkdtemp(prefix="rw-dumps-")
    script = Path(folder) / f"{name}_rank.py"
    script.write_text(PRELUDE.format(worker=str(WORKER_PATH), folder=folder) + textwrap.dedent(code))
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "FREE_PORT": str(port)}, start_new_session=True)
    try:
        assert process.stdout.readline().strip() == "ready", name
        time.sleep(3)
        os.kill(process.pid, STACK_SIGNAL)
        time.sleep(1)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    text = last_dump((Path(folder) / "rank-0.txt").read_text())
    (DATA / f"faulthandler_{name}.txt").write_text(text.replace(folder, "/tmp/recorded"))
    print(name, "recorded")


if __name__ == "__main__":
    for scenario in sys.argv[1:] or list(SCENARIOS):
        record(scenario, SCENARIOS[scenario])
