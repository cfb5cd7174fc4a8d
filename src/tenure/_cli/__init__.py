"""The ``tenure`` command.

Errors are one clear line on stderr and a non-zero exit; ``--debug`` shows the
traceback. Every argument is checked before anything starts: numbers are finite
and in range, names are printable and short, payloads are JSON objects. The
database is ``--dsn``, else ``TENURE_DSN``, else the embedded server in
tenure's data directory. Only ``migrate`` and ``worker`` (and ``enqueue
--migrate``) create tenure's tables; every other command says so when they are
missing, so a mistyped DSN gets one line instead of a new schema. Tables are
rendered with rich; what they show comes from statements that never select
payloads, results or error messages, so the output is safe to paste into a
ticket. Every value in them is plain text (never rich markup or an emoji code)
with its control characters made visible (`_text.printable`), so a key, a
worker name or a progress message can neither break the table nor drive the
terminal.

Module map:

    _parser    the argument tree and its validators (bounds, durations, JSON, TENURE_* defaults)
    _output    tables and one-line errors
    _commands  the database commands, through the App's client and admin
    _serve     long-running commands, tools, embedded, and the App a command names
    _main      main(argv): parse, log, run, report
    _chaos_worker  ``tenure worker`` plus the chaos kit's history (how ``tenure chaos``
               starts its workers, run with ``python -m``)
"""

from ._main import main
from ._parser import _parser
from ._serve import _collector, _loop_factory

__all__ = ["_collector", "_loop_factory", "_parser", "main"]
