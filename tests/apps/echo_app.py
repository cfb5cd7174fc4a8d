"""Tools for the security tests: echo a payload back; report what a tool can see."""

import os
from typing import Any

import tenure

app = tenure.App()


@app.tool("echo", lease=5, heartbeat=1, jitter=1)
async def echo(ctx: tenure.Context, value: Any) -> Any:
    return value


@app.tool("inspect_environment", lease=5, heartbeat=1, jitter=1)
def inspect_environment(ctx: tenure.Context) -> dict[str, Any]:
    secrets = [
        k for k, v in os.environ.items() if k.startswith(("TENURE_DSN", "PG")) or "dbname" in v
    ]
    return {"credential_variables": secrets, "context_fields": sorted(vars(ctx))}
