"""Stands in for torchrun and one worker under an agent (no torch: starts in milliseconds).

It speaks the real protocol to the agent's relay (RANKWATCH_SOCKET, with the token the
agent gave it), prints one line the way torchrun prefixes rank 0's output, and then
either exits with status 3 without the worker's exit message (``exit``) or runs until
it is stopped (``forever``). A second argument ``child`` first starts a child that ignores
SIGTERM in a session of its own (a helper that would outlive the job).
"""
import json
import os
import socket
import subprocess
import sys
import time


def send(connection, message_type, **fields):
    connection.sendall((json.dumps({"type": message_type, "v": 1, **fields}) + "\n").encode())


connection = socket.socket(socket.AF_UNIX)
connection.connect(os.environ["RANKWATCH_SOCKET"])
send(connection, "hello", token=os.environ["RANKWATCH_TOKEN"], run_key=os.environ["RANKWATCH_RUN_KEY"], rank=0,
     local_rank=0, node_rank=int(os.environ["RANKWATCH_NODE_RANK"]), world_size=1, local_world_size=1,
     host=os.environ["RANKWATCH_NODE_HOST"], pid=os.getpid(), python=sys.executable, python_version="3",
     torch=None, restart=0, argv=["fake"])
send(connection, "metrics", rank=0, items=[[time.time(), 0, "loss", 0.5, "log"]])
print("[rw:0]:hello from the fake worker", flush=True)
if sys.argv[2:] == ["child"]:
    ready_read, ready_write = os.pipe()
    subprocess.Popen([sys.executable, "-c", "import os, signal, sys, time\n"
                      "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                      "os.write(int(sys.argv[1]), b'up')\n"
                      "while True: time.sleep(0.1)", str(ready_write)],
                     pass_fds=[ready_write], start_new_session=True, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    os.close(ready_write)
    os.read(ready_read, 2)
if sys.argv[1] == "exit":
    time.sleep(0.3)  # let the relay read the messages before the connection ends
    sys.exit(3)
while True:
    time.sleep(0.1)
