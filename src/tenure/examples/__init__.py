"""Runnable examples, importing only tenure's public names; the demos run them.

Module map:

    case_service    a case-management service behind tenure.fence (the receiver side)
    review          a review pipeline: developer agent, QA gate, SecOps gate, a person's
                    sign-off at a waitpoint, an outbox to the tracker (the case service)
    review_sigkill  ``tenure demo --pipeline``: the review pipeline with workers SIGKILLed
                    right after a verdict and in the middle of a gate
    agent           a durable pydantic-ai agent (an offline stand-in model): its run is a
                    job, its model requests and tool calls steps, its tenure tool a child job
    mcp_server      an MCP server whose tool opens cases at the case service, once
"""
