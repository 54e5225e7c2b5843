"""`rankwatch agent` and `rankwatch node-info`: the node side of a multi-node job.

Both run on a remote node, started by the head runner over ssh in the interpreter
the job uses there; a person does not normally type them.
"""

from __future__ import annotations

import argparse
import json

from runner.remote.agent import main as run_agent
from runner.remote.node_info import node_info


def add_parsers(commands) -> None:
    # Internal: added without help, so `rankwatch --help` does not list them (they still run).
    agent = commands.add_parser(
        "agent",
        description="Run torchrun for one node of a multi-node job and report to the head runner. "
                    "The head starts this over ssh and writes the launch (with the job's token) to its stdin.")
    agent.set_defaults(handler=agent_main)
    info = commands.add_parser("node-info", description="What this node offers a multi-node job (versions, folders, "
                                                        "GPUs); the head's preflight runs this over ssh.")
    info.add_argument("--workdir", metavar="DIR", help="also say whether this folder exists here")
    info.add_argument("--script", metavar="PATH", help="also say whether this script exists here (relative: to --workdir)")
    info.add_argument("--json", action="store_true", help="one JSON object (what the head's preflight reads)")
    info.set_defaults(handler=node_info_main)


def agent_main(args: argparse.Namespace) -> int:
    return run_agent()


def node_info_main(args: argparse.Namespace) -> int:
    info = node_info(args.workdir, args.script)
    if args.json:
        print(json.dumps(info))
        return 0
    print(f"{info['hostname']}: Python {info['python_version']} ({info['python']}), "
          f"Rankwatch {info['rankwatch'] or 'not installed'}, torch {info['torch'] or 'not installed'}")
    for name in ("workdir", "script"):
        if info[name] is not None:
            print(f"  {name} {info[name]['path']}: {'exists' if info[name]['exists'] else 'missing'}")
    gpus = info["gpus"]
    print(f"  GPUs: {gpus['count'] if gpus['available'] else 'none (' + str(gpus['reason']) + ')'}")
    return 0
