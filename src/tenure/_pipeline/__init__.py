"""Durable pipelines: stages as jobs, verdicts as values, one transaction per transition."""
