-- The spend ledger: every audit-stream entry of every shard, once, and the
-- totals kept from them in the same transaction (export/store.go).

-- ledger_events is append-only: one row per audit-stream entry, keyed by the
-- stream (campaign/day/shard) and the entry's id (ms-seq). Money is bigint
-- micros.
CREATE TABLE ledger_events (
    campaign     text        NOT NULL,
    day          date        NOT NULL,
    shard        integer     NOT NULL CHECK (shard >= 0),
    entry_ms     bigint      NOT NULL,
    entry_seq    bigint      NOT NULL,
    kind         text        NOT NULL,
    micros       bigint      NOT NULL,
    unused       bigint      NOT NULL,
    ref          text        NOT NULL,
    holder       text        NOT NULL,
    at           timestamptz NOT NULL,
    fields       jsonb       NOT NULL,
    exported_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (campaign, day, shard, entry_ms, entry_seq)
);
CREATE INDEX ledger_events_at ON ledger_events (campaign, at);

CREATE FUNCTION ledger_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger_events is append-only: % refused', TG_OP;
END $$;
CREATE TRIGGER ledger_events_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_events
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_events_append_only();

-- spend_days and spend_hours: per campaign-day, and per hour (UTC, of the
-- event's ledger time) of it, what its events add up to, as the ledger's
-- report counters count them (lease/lua/prelude.lua, audit).
CREATE TABLE spend_days (
    campaign   text   NOT NULL,
    day        date   NOT NULL,
    budget     bigint NOT NULL DEFAULT 0,
    spent      bigint NOT NULL DEFAULT 0,
    returned   bigint NOT NULL DEFAULT 0,
    lost       bigint NOT NULL DEFAULT 0,
    carry      bigint NOT NULL DEFAULT 0,
    cuts       bigint NOT NULL DEFAULT 0,
    granted    bigint NOT NULL DEFAULT 0,
    closed     bigint NOT NULL DEFAULT 0,
    leases     bigint NOT NULL DEFAULT 0,
    settled    bigint NOT NULL DEFAULT 0,
    events     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (campaign, day)
);
CREATE TABLE spend_hours (
    campaign   text        NOT NULL,
    day        date        NOT NULL,
    hour       timestamptz NOT NULL,
    budget     bigint NOT NULL DEFAULT 0,
    spent      bigint NOT NULL DEFAULT 0,
    returned   bigint NOT NULL DEFAULT 0,
    lost       bigint NOT NULL DEFAULT 0,
    carry      bigint NOT NULL DEFAULT 0,
    cuts       bigint NOT NULL DEFAULT 0,
    granted    bigint NOT NULL DEFAULT 0,
    closed     bigint NOT NULL DEFAULT 0,
    leases     bigint NOT NULL DEFAULT 0,
    settled    bigint NOT NULL DEFAULT 0,
    events     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (campaign, day, hour)
);

-- export_cursors: per stream, the last entry exported (the highest id) and
-- how many, written in the transaction that wrote the rows.
CREATE TABLE export_cursors (
    campaign   text        NOT NULL,
    day        date        NOT NULL,
    shard      integer     NOT NULL,
    last_ms    bigint      NOT NULL,
    last_seq   bigint      NOT NULL,
    events     bigint      NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (campaign, day, shard)
);

-- export_gaps: entries of a stream that were gone before they were exported
-- (trimmed past the cursor, expired) or a stream found behind what was
-- exported (a restored Redis), recorded once per stream, kind and cursor.
-- trimmed: the entries after after_id and before until_id (the stream's first
-- entry now); missing: the stream is gone (until_id ''); behind: Redis's
-- stream ends at after_id, the export holds entries up to until_id.
CREATE TABLE export_gaps (
    campaign    text        NOT NULL,
    day         date        NOT NULL,
    shard       integer     NOT NULL,
    kind        text        NOT NULL,
    after_id    text        NOT NULL,
    until_id    text        NOT NULL,
    missing     bigint      NOT NULL,
    detected_at timestamptz NOT NULL,
    PRIMARY KEY (campaign, day, shard, kind, after_id)
);
