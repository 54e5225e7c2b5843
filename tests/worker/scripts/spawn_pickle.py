"""Sends objects of a class defined in this script through a ``spawn`` multiprocessing pool.

The spawned child re-imports the main module from its ``__file__``, as DataLoader
workers do with ``multiprocessing_context="spawn"``.
"""

import multiprocessing


class Box:
    def __init__(self, value):
        self.value = value


def double(box):
    return Box(box.value * 2)


if __name__ == "__main__":
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        print("spawn", [box.value for box in pool.map(double, [Box(1), Box(2)])])
