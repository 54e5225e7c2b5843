"""Fails the way training scripts fail: a helper thread dies, then the main thread raises.

The main exception is chained (``During handling of the above exception...``) so
that the printed traceback has some shape to compare.
"""

import threading


def side_work():
    raise KeyError("from a thread")


def inner(value):
    raise ValueError(f"bad value {value}")


def outer():
    try:
        {}["missing"]
    except KeyError:
        inner(42)


side = threading.Thread(target=side_work, name="side")
side.start()
side.join()
print("before failure", flush=True)
outer()
