"""Plain-SQL migrations of the receiver kit's tables (applied by ``migrate_fence``)."""
