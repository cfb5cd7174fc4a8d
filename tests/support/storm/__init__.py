"""Storms: many jobs, several workers, one nemesis, then a checker's verdict.

Test tooling, not shipped in the wheel: the quick storms of ``tests/system/storms`` and the
long soaks of ``bench/soak`` run it. It builds on the fault harness that ``tenure
chaos`` ships (``tenure._chaos``: `Supervisor`, `FaultProxy`, the history):

- `storm`: the plans, the nemeses and `run_storm`;
- `checker`: the verdict on a run's evidence;
- `harness`: what only storms need of processes (libfaketime, fault evidence from
  /proc, the example receiver, the evidence read from the databases);
- `worker_main`: the storms' worker, which also records its clocks.
"""
