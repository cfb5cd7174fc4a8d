-- tenure 0010: the trace a job belongs to. With tenure.otel instrumented, enqueue stores the
-- producer's span as a W3C carrier, {"traceparent": "00-…", "tracestate": "…"} (tracestate
-- only when there is one), and every attempt's claim, call and fenced commit continue that
-- trace; NULL otherwise. Readers validate it and ignore a malformed one: a bad value can
-- cost a job its trace, never its run. The check bounds its size for writers other than
-- tenure. NOT VALID: the column is new, so no existing row can break it, and the big table
-- is not scanned under this migration's lock; new rows are checked all the same.
ALTER TABLE tenure_jobs ADD COLUMN trace_context jsonb;
ALTER TABLE tenure_jobs ADD CONSTRAINT tenure_jobs_trace_context_check
    CHECK (trace_context IS NULL
           OR (jsonb_typeof(trace_context) = 'object' AND octet_length(trace_context::text) <= 1024))
    NOT VALID;
