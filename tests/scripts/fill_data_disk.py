"""Every rank prints; rank 0 fills a disk in the middle (as a big checkpoint would); every
rank goes on printing, then leaves a note that it got to the end. No torch.

Usage (under torchrun): ``fill_data_disk.py FOLDER_TO_FILL NOTES_FOLDER``
"""
import errno
import os
import sys
import time

target, notes = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])
for index in range(20):
    print(f"rank {rank} before {index}", flush=True)
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
    print(f"rank {rank} after {index} " + "y" * 100)
print(f"rank {rank} to stderr too", file=sys.stderr)
with open(os.path.join(notes, f"rank-{rank}-done"), "w") as note:
    note.write("done")
print(f"rank {rank} done", flush=True)
