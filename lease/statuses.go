package lease

// The statuses the ledger's scripts answer besides grant's (grantNew and
// the rest, in ledger.go), as each script's header lists them:
// TestScriptStatusesMatchTheirHeaders checks that every status a header
// lists has its name here, meaning the same, and the other way round.

// Statuses any shard script may answer.
const (
	statusNoDay  = -1 // no such day: the shard's state is gone (run answers ErrDayNotOpen)
	statusFenced = -3 // fenced off: a newer reconciler's fence is on the shard
	statusHeld   = -4 // held by a budget cut being applied: nothing done
)

// The statuses of release.lua (and of renew.lua's release half): prelude's
// release_lease.
const (
	releaseNow     = 0 // released now
	releaseRetried = 2 // released before: a retry, the same answer
	releaseSettled = 3 // settled before: the holder was too late
	releaseUnknown = 4 // unknown lease
)

// The statuses of settle.lua and survey.lua besides the shared ones.
const (
	settleDone = 0 // settled what was due (maybe nothing)
	surveyRead = 0 // read, the fence recorded
)

// The statuses of reassert.lua besides Reasserted's three (re-recorded,
// known, closed).
const reassertShardClosed = 3 // the shard is closed (open_only: a recovery)

// The statuses of reassert_run.lua.
const (
	runRaised      = 0 // the run's totals raised
	runNothing     = 1 // nothing to raise
	runShardClosed = 2 // the shard is closed (open_only: a recovery)
)

// The statuses of move_out.lua.
const (
	moveOutNow     = 0 // moved now
	moveOutRetried = 1 // already recorded: a retry
)

// The statuses of watermark.lua.
const (
	watermarkAdvanced = 0 // advanced
	watermarkMoved    = 1 // the key is not what the caller read
	watermarkFenced   = 2 // fenced off: nothing written
)
