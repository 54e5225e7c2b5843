"""An integer field given something that is no integer is told the range it allows, whole.

The range error already says "between 1 and 1024"; the type error said only ">= 1", so a
user who fixed the type could still type a value out of range and meet a second error.
"""

from __future__ import annotations

import pytest

from runner.profile.parse import SpecErrors, spec_from_dict


def test_an_integer_field_of_the_wrong_type_names_both_of_its_bounds():
    table = {"script": "train.py", "nproc_per_node": "four", "max_restarts": 1.5,
             "nodes": [{"host": "localhost", "port": "ssh"}], "telemetry": {"hash_every": "often"}}
    with pytest.raises(SpecErrors) as caught:
        spec_from_dict(table)
    errors = {error.field: error.message for error in caught.value.errors}
    assert errors == {
        "nproc_per_node": "expected an integer between 1 and 1024 or \"auto\", got 'four'",
        "max_restarts": "expected an integer between 0 and 1000, got 1.5",
        "nodes[0].port": "expected an integer between 1 and 65535, got 'ssh'",
        "telemetry.hash_every": "expected an integer >= 0, got 'often'",  # no upper bound to name
    }
