"""Slurm: the runner submits a run with sbatch and watches it through Slurm's own tools.

Rankwatch never allocates anything itself. One task per allocated node runs the
node agent (``runner.remote.agent``'s, started by srun instead of ssh), which
starts torchrun with c10d rendezvous on the allocation's first node and reports
to the runner over its token-authenticated TCP listener:

* ``script``: the sbatch script, by hand (plain torchrun) and the runner's (agents);
* ``client``: Slurm's commands, run here or on a login host over ssh;
* ``preflight``: ``sbatch --test-only`` and the cluster's interpreter, before submitting;
* ``job``: submission, polling (state, reason, queue position), scancel;
* ``states``: what Slurm says, and what it means for the run;
* ``nodes``: ``SlurmNodes``/``SlurmNode``, the run's node handles for a Slurm job;
* ``address`` and ``relay``: how agents reach the runner (directly, or through the login host);
* ``agent``: ``python -m runner.slurm.agent``, what srun starts on each node;
* ``outcome``: Slurm's end (timeout, cancelled, preempted...) in the run's summary;
* ``watchdog``: cancels the job if the runner is killed;
* ``hostlist``: Slurm's compact node lists.
"""
