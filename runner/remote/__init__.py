"""Several nodes: the head runner starts torchrun on every other node over SSH.

torchrun's own c10d rendezvous does the distributed part; this package only
starts, watches and stops it on each node:

* ``ssh``: the OpenSSH command lines (argument lists; remote commands quoted).
* ``preflight``: before anything starts, each node is reachable and has Rankwatch
  and torch, in versions that match the head's.
* ``addresses``: the one address the head listens on for its agents.
* ``remote_node``: ``RemoteNode``, the head's handle on one node (start, wait, stop;
  a node that drops out is lost).
* ``agent``: ``python -m runner agent``, what runs on the node: torchrun, a local
  relay for its workers' telemetry, and one authenticated TCP link to the head.
* ``launch_message``: what the head tells an agent over ssh's stdin.
"""
