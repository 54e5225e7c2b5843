"""Ends with an uncaught KeyboardInterrupt, as after Ctrl-C: Python then exits by SIGINT."""


def train():
    raise KeyboardInterrupt


train()
