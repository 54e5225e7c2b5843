"""Once the file named by the first argument exists, holds the GIL in C code for good (``sum`` over
a huge range): no other thread runs Python from then on."""

import os
import sys
import time


def hold_the_gil():
    print("holding", flush=True)
    return sum(range(10**15))


while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
hold_the_gil()
