package workflows

import "slices"

// Revisions of the workflow code. A run carries the revision it was started under in its
// Input, which is part of its history. A change gated with workflow.GetVersion records a
// Version marker, and through the SDK a TemporalChangeVersion search-attribute write, in
// every run that reaches the gate: one more history event and one more visibility write per
// message for as long as the gate stays. A run started at a revision that includes the change
// takes its new branch without asking: its input says so as durably as a marker would, so
// its replay is as deterministic. Runs started before (revision 0) still ask GetVersion, and
// histories with markers replay as before (the SDK does not match Version markers and their
// search-attribute writes against the replay's commands).
//
// A change joins a revision only once every worker that can pick up new runs has its gate:
// a run started at a revision must not be run by code that lacks the change.
const CurrentRevision = 1

// revisionChanges lists, for each revision, the gated changes it takes without GetVersion.
var revisionChanges = [][]string{
	1: {changePriorAttempts, changeUnknownCapPerPolicy, changeRetryOpensWindow, changeReportsWithQuietTimer, changeBreakerHoldsRetries},
}

// includes reports whether this run's revision includes the gated change: its new branch is
// taken without a version marker.
func (r *retryRun) includes(changeID string) bool {
	for rev := 1; rev <= min(r.revision, len(revisionChanges)-1); rev++ {
		if slices.Contains(revisionChanges[rev], changeID) {
			return true
		}
	}
	return false
}
