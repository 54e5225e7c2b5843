"""Every rank prints; rank 0 fills a disk in the middle (as a big checkpoint would); every
rank goes on printing, then leaves a note that it got to the end. No torch.

Each line is one ``write`` of less than PIPE_BUF bytes, so that under plain torchrun
(both ranks on one pipe) lines never interleave mid-line whatever the buffering
(``PYTHONUNBUFFERED=1`` makes ``print`` write the text and its newline apart): the
test compares Rankwatch's output with plain torchrun's line by line.

Usage (under torchrun): ``fill_data_disk.py FOLDER_TO_FILL NOTES_FOLDER``
"""
import errno
import os
import sys
import time

target, notes = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])


def say(text, stream=1):
    os.write(stream, (text + "\n").encode())


for index in range(20):
    say(f"rank {rank} before {index}")
if rank == 0:
    written, outcome = 0, "limit"
    try:
        with open(os.path.join(target, "big-checkpoint.bin"), "wb") as filler:
            while written < 64 << 20:
                filler.write(b"\0" * 65536)
                filler.flush()
                written += 65536
    except OSError as error:
        outcome = errno.errorcode.get(error.errno, str(error.errno))
    with open(os.path.join(notes, "free-when-filled"), "w") as note:
        note.write(str(os.statvfs(target).f_bavail))  # 0: the disk really was full then
    with open(os.path.join(notes, "filled"), "w") as note:
        note.write(outcome)
while not os.path.exists(os.path.join(notes, "filled")):
    time.sleep(0.05)
for index in range(1000):
    say(f"rank {rank} after {index} " + "y" * 100)
say(f"rank {rank} to stderr too", stream=2)
with open(os.path.join(notes, f"rank-{rank}-done"), "w") as note:
    note.write("done")
say(f"rank {rank} done")
