"""How the CLI reports errors: one line each, naming what is wrong and how to fix it.

Exit codes: 0 success; 1 a runtime failure (the job failed, a run was not found);
2 invalid input (a profile, a flag, a missing file): nothing was launched.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from runner.profile.parse import SpecErrors

EXIT_FAILED = 1
EXIT_INVALID = 2


def spec_errors_json(errors: SpecErrors) -> dict:
    return {"error": str(errors).splitlines()[0] if str(errors) else "invalid spec",
            "errors": [{"field": e.field, "message": e.message} for e in errors.errors]}


def print_spec_errors(errors: SpecErrors, source: str, *, as_json: bool = False,
                      flag_of: Callable[[str], str | None] | None = None) -> int:
    """One line per error: ``SOURCE: FIELD: MESSAGE``, or ``--FLAG: MESSAGE`` where
    ``flag_of(field)`` says a flag given on the command line set that field."""
    if as_json:
        print(json.dumps(spec_errors_json(errors)))
    else:
        for error in errors.errors:
            flag = flag_of(error.field) if flag_of is not None else None
            if flag is not None and not error.message.startswith(flag):
                print(f"rankwatch: {flag}: {error.message}", file=sys.stderr)
            else:
                print(f"rankwatch: {source}: {error.field}: {error.message}", file=sys.stderr)
    return EXIT_INVALID


def fail(message: str, *, as_json: bool = False, code: int = EXIT_INVALID) -> int:
    if as_json:
        print(json.dumps({"error": message, "errors": []}))
    else:
        print(f"rankwatch: {message}", file=sys.stderr)
    return code
