"""``main``: parse, configure logging, run the command, and turn an error into one line
and an exit status."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from .._app import App
from .._errors import ConfigError, TenureError
from .._log import configure_logging
from ._commands import _with_app
from ._output import EXIT_ERROR, _error, _one_line
from ._parser import EXIT_USAGE, _check_chaos, _parser
from ._serve import _dashboard, _embedded, _load, _mcp, _tools, _worker


def _run(args: argparse.Namespace) -> int:
    if args.command == "chaos":
        from .._chaos import chaos_command

        _check_chaos(args)
        return chaos_command(args)
    if args.command == "demo":
        from .._demo import demo_command

        return demo_command(args)
    if args.command == "migrate":
        app = App(args.dsn, migrate=False)
        try:
            applied = app.sync.admin.migrate()
            print(f"schema up to date; applied now: {', '.join(map(str, applied)) or 'none'}")
        finally:
            app.close()
        return 0
    if args.command == "worker":
        return _worker(args)
    if args.command == "tools":
        return _tools(args)
    if args.command == "dashboard":
        return _dashboard(args)
    if args.command == "mcp":
        return _mcp(args)
    if args.command == "embedded":
        return _embedded(args)
    target = _load(args) if getattr(args, "app", None) else None
    app = target or App(args.dsn, migrate=False)
    # Only `enqueue --migrate` creates tables; a mistyped DSN gets NO_SCHEMA instead, and
    # the doctor must see an unmigrated schema as it is.
    app.auto_migrate = args.command == "enqueue" and bool(args.migrate)
    try:
        return asyncio.run(_with_app(app, args, target))
    finally:
        app.close()


def _app_package(args: argparse.Namespace) -> tuple[str, ...]:
    """The top-level package of MODULE:APP: the app's own loggers log like tenure's."""
    app = getattr(args, "app", None)
    return (app.partition(":")[0].split(".")[0],) if isinstance(app, str) and app else ()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = _parser()
    except ConfigError as exc:  # a malformed TENURE_* default
        print(_error(exc), file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    log_format = args.log_format or os.environ.get("TENURE_LOG_FORMAT", "text")
    configure_logging(
        args.log_level,
        others=args.log_level_others,
        as_json=log_format == "json",
        own=_app_package(args),
    )
    try:
        return _run(args)
    except KeyboardInterrupt:
        return 130
    except (TenureError, OSError) as exc:  # a database error is a StoreError
        if args.debug:
            raise
        print(_error(exc), file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # a bug, or input nothing above foresaw: still one line
        if args.debug:
            raise
        print(
            f"tenure: error: {type(exc).__name__}: {_one_line(exc)} (--debug shows the traceback)",
            file=sys.stderr,
        )
        return EXIT_ERROR
