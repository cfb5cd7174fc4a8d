"""The workers of `tenure demo --agent`: the demo's tools (`tenure._demo_workers`) and the
durable agent of `tenure.examples.agent`, whose runs are jobs of the tool ``agent:desk``.
Apart from `_demo_workers`, so that the plain demo's workers never import pydantic-ai."""

from __future__ import annotations

from ._demo_workers import app
from .examples.agent import build_agent

agent, durability = build_agent(app)

__all__ = ["agent", "app", "durability"]
