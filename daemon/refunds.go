package daemon

import "time"

// Bidders' refunds in the audit stream.
//
// A REFUND the bucket accepts puts tokens back (bucket.Refund): the ledger
// sees it only as part of a lease's unused micros, or as spend again, so its
// money needs nothing more. The billing record wants the refunds themselves
// (pacer-export's refunded column), so each release or renewal of a
// campaign-day reports the refunds its bucket accepted since the last one
// that reported (ledger.ReleaseRefunded, GrantRequest.Refunded), written in
// the release's audit entry. A release the ledger refuses (the lease was
// settled; the day is not open) hands its refunds back to the next one. A
// release left unanswered is asked again with the same lease id, its refunds
// held by it, until the ledger says released (they were recorded with it,
// once: a retry writes nothing) or settled (they were not: handed on); past
// its settlement it is asked for as long as its day is current, so refunds
// are never recorded twice. Every accepted refund is followed by a release or a
// renewal (it was accepted only while a lease fed the bucket), so a day's
// entries add up to every refund its buckets accepted, unless the daemon
// dies first (its refunds since its last release are not recorded: the
// settlement counts the lease as spent) or a release stays unanswered until
// its day ends (its refunds are recorded only if a try was applied).

// takeRefunds returns the refunds day's bucket accepted and no release or
// renewal reported yet, and counts them reported. Refill loop only.
func (c *campaign) takeRefunds(now time.Time, day string) int64 {
	ds := c.day.Load()
	if ds == nil || ds.day.Key != day {
		return 0
	}
	accepted := ds.b.Stats(now).Refunded
	n := accepted - ds.refundsTold
	ds.refundsTold = accepted
	return n
}

// untakeRefunds hands refunds a release could not record back to the next
// release or renewal of day. Refill loop only.
func (c *campaign) untakeRefunds(day string, n int64) {
	if ds := c.day.Load(); ds != nil && ds.day.Key == day {
		ds.refundsTold -= n
	}
}
