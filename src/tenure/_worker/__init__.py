"""The worker: claims jobs, runs each tool call under its lease, commits what it still owns.

Module map (a job passes through them top to bottom):

    _worker     Worker: the claim loop (woken by NOTIFY or a timer), one task per call
                wrapped by the App's interceptors, every background loop under one
                supervisor (tenure._maintenance._supervisor), soft then hard shutdown
    _ownership  what the process knows of one lease: owned / unknown / lost, and the
                conservative local deadline (shared by the heartbeat thread and the tool)
    _heartbeat  HeartbeatThread: one batched, fenced extension per tick on its own thread
                and connection, and the deadline watcher thread
    _executor   runs one call (async on the loop, plain functions on a thread of their
                own), enforces the time limit, turns what happened into an outcome
    _completer  Completer: fenced commits, batched; a stage's outcome goes through its
                run's transition (tenure._pipeline._engine) instead
    _steps      Steps: a job's fenced steps (ctx.step), read once per attempt and each
                recorded under its token; a threaded tool's steps go through the loop
    _context    Context: what a tool sees of its call (token, ensure_owned, progress,
                steps, waitpoints, fenced HTTP)

A tool's `Context` (`_context.py`) is built here, per claim. ARCHITECTURE.md, at the
repository's root, draws the threads and the life of a job.
"""
