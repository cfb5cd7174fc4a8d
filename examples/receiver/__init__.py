"""An example receiver of fenced side effects: a small case-management service."""
