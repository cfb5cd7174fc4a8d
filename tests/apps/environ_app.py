"""A tool that tells whether a marker is in its worker's environment: the one it started
with (/proc/self/environ, which deleting a variable later does not change) and the
current one (os.environ)."""

import os
from pathlib import Path

import tenure

app = tenure.App()


@app.tool("environ_holds", lease=5, heartbeat=1, jitter=1)
def environ_holds(ctx: tenure.Context, marker: str) -> dict[str, bool]:
    return {
        "initial": marker.encode() in Path("/proc/self/environ").read_bytes(),
        "current": any(marker in value for value in os.environ.values()),
    }
