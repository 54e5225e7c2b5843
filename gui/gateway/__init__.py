"""The GUI's gateway to the runner: the only part of ``gui`` that imports ``runner``.

An explicit, small API: each module lists what it exports (``__all__``), and what it exports is
a facade it defines or a typed value those facades and the hub's messages carry
(``tests/gui/test_gateway_surface.py`` keeps it so). The facades, by job:

* ``launch_rules.LaunchRules``: what ``rankwatch run`` makes of a launch spec (parse, check on
  this machine, plan the rendezvous, the commands it would run: the form's preview is the
  runner's command), and ``SettingWidget``, the widget a generic setting is edited with;
  ``launch_spec``: the spec's typed values (``LaunchSpec``, ``SpecErrors``, ``TomlTable``...);
* ``profiles.ProfileLibrary``: the profile files, by name, with the CLI's rules;
* ``run_state.RunReading``: how the runner reads a run's rows (steps done, ``hung``, decoding a
  hub message), with the typed messages and the one reducer (``RunState``);
* ``wording.RunWording``: the runner's words for how ranks ended, stalls, rank lists, progress;
* ``findings.FindingEvents``: each monitor's event as the runner's type for it;
  ``runner_rules``: the runner's other typed values (states, ``RunSummary``, hints, doctor checks);
* ``store_reads.StoreReads`` + ``store_reader.store_reader``: the reads of the run store and the
  one background reader that runs them (widgets and models never open SQLite);
* ``link.RunnerLink`` (the runner's socket), ``process.RunnerProcess`` (start a detached runner),
  ``probe.RunnerProbe`` (+ ``probe_output``: ask about an interpreter and the GPUs),
  ``doctor.DoctorProcess`` (``rankwatch doctor``), ``files.RankwatchFiles`` (Rankwatch's folders).

The contract's own types (``Event``, ``EventKind``, ``LogLine``) come from ``rankwatch.protocol``.
Layers (import-linter, ``pyproject.toml``): the window and widgets, then charts, then
the Qt-free models, then this gateway, then the contract (``rankwatch.protocol``).
This ``__init__`` imports nothing, so a model importing one gateway module does not
drag in Qt.
"""
