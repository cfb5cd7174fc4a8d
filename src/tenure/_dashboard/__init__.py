"""The dashboard, a front door: server-rendered pages, escaped, no payload.

Its pages read through the App's admin (never the store); its actions (cancel, retry,
bulk, the waitpoint webhook) go through the App's client and admin. The HTTP rules it
shares with /metrics and the MCP server (Host and Origin checks, the server thread)
stay in tenure._observe._http.

    _dashboard  the dashboard's routes, sessions and CSRF
    _pages      the dashboard's HTML
    _explorer   the dashboard's job explorer (/jobs): filters, pages, bulk results
    _picture    a job's ownership picture: each claim a bar on one time axis (SVG)
    _pipeline_graph  a pipeline run drawn as its graph, with each stage's rounds (SVG)
    _run_page   a durable run's page (/runs): its steps and its tools' jobs on one time
                axis (SVG), model usage, totals
    _workers_page  the dashboard's workers page: alive, silent, stopped, leases held
    _queues_page   the dashboard's queues page: per tool and minute, in and out (SVG)
"""
