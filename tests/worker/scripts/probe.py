"""Prints what a script can observe about how it was started, as one JSON line.

Run as ``python probe.py ARGS``, ``python -m probe ARGS`` and under the bootstrap
in both forms; the worker tests compare the outputs. ``--exit N`` ends with
``sys.exit(N)``.
"""

import json
import sys

import rankwatch

info = {
    "name": __name__,
    "argv": sys.argv,
    "path": sys.path,
    "file": __file__,
    "main_module_is_this": sys.modules["__main__"].__dict__ is globals(),
    "loader": type(__loader__).__name__,
    "spec": None if __spec__ is None else __spec__.name,
    "package": __package__,
    "cached": globals().get("__cached__", "absent"),
    "builtins": type(__builtins__).__name__,
}
print(json.dumps(info, sort_keys=True))
print("active", rankwatch.is_active(), file=sys.stderr)
rankwatch.log(step=0, probe=1.0)

if __name__ == "__main__" and "--exit" in sys.argv:
    sys.exit(int(sys.argv[sys.argv.index("--exit") + 1]))
