"""The GUI's gateway to the runner: the only part of ``gui`` that imports ``runner``.

* ``link``: the subscription to a runner's socket (``RunnerLink``, QLocalSocket);
* ``process``: starting a detached runner for a launch spec (``RunnerProcess``);
* ``probe``: asking ``rankwatch probe`` about an interpreter and the GPUs (``RunnerProbe``);
* ``store_reader`` / ``store_reads``: the one background reader of the run store and
  the reads it runs (widgets and models never open SQLite);
* ``launch_spec``, ``runner_rules``: the runner's Qt-free schema and rules the GUI
  shows as they are (the launch spec and its commands; states, progress, wording).
* ``findings``: what the runner's monitors found (stragglers, the bottleneck verdict,
  stalls, stack captures...) and the events they come in, as the runner's own types.

Layers (import-linter, ``pyproject.toml``): the window and widgets, then charts, then
the Qt-free models, then this gateway, then the contract (``rankwatch.protocol``).
This ``__init__`` imports nothing, so a model importing one gateway module does not
drag in Qt.
"""
