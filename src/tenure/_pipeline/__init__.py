"""Durable pipelines: stages as jobs, verdicts as values, one transaction per transition.

Module map:

    _model        what a pipeline is: Stage, Verdict, Pipeline, Run; validated once,
                  against the registered tools, when it is declared
    _transitions  deciding a transition: pure functions (decide_start, decide_outcome,
                  decide_redispatch) from a run's locked picture to the rows to write
    _engine       Transitions: applies one decision in one transaction under the run's
                  row lock (the stage job's fenced commit, the next stages' jobs, the
                  outbox), verdicts from outside, and the rescuer's moves
    _plan         a model's plan (a list of tool calls) checked and turned into a pipeline
"""
