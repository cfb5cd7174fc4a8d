"""tenure.App: a thin face over three parts with one job each.

Module map:

    _face        App: registration (the registry's), the client's coroutines (it is one),
                 the lifecycle, and its parts as ``app.registry``, ``app.admin``, ``app.sync``
    _registry    Registry: tools, limits, quotas, schedules, pipelines, the signing key;
                 turns a call into a job. A Worker sees only this, as `ToolRegistry`
    _client      Client: enqueue, get, wait, watch, cancel, answer a waitpoint (the one
                 method every front end answers through), pipelines
    _admin       Admin: an operator's reads (jobs, explorer, journal, workers), bulk
                 retry and cancel, doctor, migrate, prune
    _sync        SyncApp, SyncAdmin: the blocking face, generated from the coroutines
    _connection  Connection: the DSN or embedded server, a store and waiters per event
                 loop, the private loop thread the blocking face runs on
    _load        load_app: the App a ``MODULE:APP`` names (the CLI, the chaos run)

Only this package builds a Store for an App; front ends (CLI, dashboard, MCP, demo,
chaos, integrations) reach the database through the client and the admin.
"""

from ._admin import NO_SCHEMA, Admin
from ._client import MAX_TOKEN, MAX_WAIT, Client
from ._connection import fresh_database, server_address
from ._face import App
from ._load import load_app
from ._registry import MAX_KEY_LENGTH, MAX_PRIORITY, Registry, check_retain
from ._sync import SyncAdmin, SyncApp

__all__ = [
    "MAX_KEY_LENGTH",
    "MAX_PRIORITY",
    "MAX_TOKEN",
    "MAX_WAIT",
    "NO_SCHEMA",
    "Admin",
    "App",
    "Client",
    "Registry",
    "SyncAdmin",
    "SyncApp",
    "check_retain",
    "fresh_database",
    "load_app",
    "server_address",
]
