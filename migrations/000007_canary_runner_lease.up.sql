-- The canary runner's lease: the holder of the runner's advisory lock
-- renews this one row (its session's backend pid, until when) every
-- second. A contender that finds the lock held and the lease expired
-- (a holder frozen or wedged, whose session stays open and so keeps the
-- lock) terminates that backend, which releases the lock, and takes over.
CREATE TABLE canary_runner_lease (
    id          boolean     PRIMARY KEY DEFAULT true CHECK (id),
    instance    text        NOT NULL,
    backend_pid integer     NOT NULL,
    until       timestamptz NOT NULL
);
