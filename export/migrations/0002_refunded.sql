-- refunded: per campaign-day and per hour, what bidders refunded to the
-- daemons (the micros their buckets accepted), from the refunded field the
-- daemons write in a release's audit entry. No part of spent or returned:
-- spent is already net of refunds (a refunded micro came back to the bucket,
-- and went back to the ledger unused or was spent again).
ALTER TABLE spend_days ADD COLUMN refunded bigint NOT NULL DEFAULT 0;
ALTER TABLE spend_hours ADD COLUMN refunded bigint NOT NULL DEFAULT 0;
