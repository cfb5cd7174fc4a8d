"""The bench's machinery; bench/run.py is its entry point.

    config.py       Config (from run.py's options), the paths, the systems' names
    system.py       log, pct, CPU (CpuWindow, per process, from /proc), RSS, small SQL helpers
    procs.py        Procs: worker processes of one measurement, started, made ready, stopped
    environment.py  the tenure source under test, the workers' environment, the machine
    systems.py      tenure, pgqueuer, procrastinate, raw SQL: schema, worker command, enqueue
    core.py         Harness: what every phase is given (config, results, database, drain_once)
    phase.py        Phase (run, report section, targets) and Evaluation
    phases/         one module per phase, each a Phase; phases.ALL in running order
    report.py       the Markdown report and the targets' evaluation, from the results

Imports go one way: config ← system ← procs, environment, systems ← core ← phase ← phases/*
and report; run.py imports phases and report. Inside the package imports are relative;
the systems' apps (tenure_app, procr_app, in bench/apps) are imported by name, from the
sys.path that Harness sets up.
"""
