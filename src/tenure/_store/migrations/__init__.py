"""tenure's plain-SQL migrations, ``NNNN_description.sql``, applied in order by
`tenure._store.migrate`; ``../schema.sql`` is what they add up to."""
