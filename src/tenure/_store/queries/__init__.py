"""Every statement tenure sends to its own database, named (``-- name: ...``), one file
per domain: jobs, waitpoints, maintenance, observe (the journal and operators' reads),
pipeline."""
