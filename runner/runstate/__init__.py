"""The run as a subscriber knows it: the hub's messages typed (``messages``) and the one
reducer that derives what every surface shows (``state.RunState``). Qt-free and I/O-free:
the terminal view and the GUI (through ``gui.gateway``) both render it."""
