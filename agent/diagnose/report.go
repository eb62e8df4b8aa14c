// Package diagnose explains what is hung in a job's teardown: it snapshots
// every process of the job's cgroups from /proc (with bounded, off-loop
// reads), classifies each thread, and keeps reports on disk.
package diagnose

import wire "github.com/gracewatch/gracewatch/agent/report"

// The report's wire form is package agent/report; this package fills it.
// These names are that package's, for this package's code and its callers.
type (
	Class       = wire.Class
	Timeline    = wire.Timeline
	Signals     = wire.Signals
	Thread      = wire.Thread
	File        = wire.File
	Process     = wire.Process
	CgroupInfo  = wire.CgroupInfo
	NodeContext = wire.NodeContext
	HostFacts   = wire.HostFacts
	Report      = wire.Report
	Omitted     = wire.Omitted
)

const (
	Unkillable           = wire.Unkillable
	ExitHang             = wire.ExitHang
	KillableD            = wire.KillableD
	Missed               = wire.Missed
	Dying                = wire.Dying
	Zombie               = wire.Zombie
	StageBeforeSignal    = wire.StageBeforeSignal
	StageAfterEscalation = wire.StageAfterEscalation
	StageOnDemand        = wire.StageOnDemand
	OutcomePending       = wire.OutcomePending
	OutcomeOverdue       = wire.OutcomeOverdue
	OutcomeEscalated     = wire.OutcomeEscalated
	OutcomeTerminated    = wire.OutcomeTerminated
	OutcomeKilled        = wire.OutcomeKilled
	OutcomeHung          = wire.OutcomeHung
	ReportVersion        = wire.ReportVersion
	FuseCtlNotMounted    = wire.FuseCtlNotMounted
)
