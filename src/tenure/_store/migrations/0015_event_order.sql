-- tenure 0014: event lists in time order (issue #22, item 11). Every list of the journal
-- (`tenure events`, a job's timeline, the dashboard's ownership feed) is ordered by the
-- database's time, then id: an event a worker saw while the database was unreachable is
-- written later, back-dated to when it happened (record_events), so its id is newer than its
-- time. The ownership feed's partial index is keyed by (at, id) for that order, so the latest
-- of them are still read from its end without a sort of every ownership event.
DROP INDEX tenure_events_notable;
CREATE INDEX tenure_events_notable ON tenure_events (at, id)
    WHERE kind IN ('lease_expired', 'heartbeat_lost', 'result_rejected', 'result_discarded',
                   'ownership_unknown', 'stale_fence_rejected', 'cancelled', 'retry_requested');
