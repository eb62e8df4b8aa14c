package api

// The answers of GET /healthz and GET /readyz.

import "github.com/gracewatch/gracewatch/agent/report"

// Health is the body of GET /healthz.
type Health struct {
	Status      string           `json:"status"`
	Name        string           `json:"name"`
	Version     string           `json:"version"`
	Leader      string           `json:"leader"`
	Aggregators []AggregatorInfo `json:"aggregators"`
}

// AggregatorInfo is an aggregator member as /healthz lists it.
type AggregatorInfo struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Leader bool   `json:"leader"`
	Self   bool   `json:"self"`
}

// Readiness is what /readyz reports.
type Readiness struct {
	Ready      bool `json:"ready"`
	MeshJoined bool `json:"mesh_joined"`
	Members    int  `json:"members"`
	Nodes      int  `json:"nodes"`
	Insecure   bool `json:"insecure"`
	// NodeRestriction: node states are taken from proven updates only
	// (the mesh refuses unproven input). False: anyone with the mesh key
	// can speak for a node without a key.
	NodeRestriction bool `json:"node_restriction"`
	// HeldDrains is the number of drains the blast-radius limit holds
	// (GET /v1/incidents shows them); they do not decide readiness.
	HeldDrains int `json:"held_drains"`
	// ClockSkewedNodes is the number of nodes whose clock disagrees with
	// this aggregator's by more than the allowance; ClockSkewed names the
	// first 10 with their offsets.
	ClockSkewedNodes int         `json:"clock_skewed_nodes"`
	ClockSkewed      []ClockSkew `json:"clock_skewed,omitempty"`
	// StateWriteError is why the drained set could not be written under
	// state_dir the last time (a full disk); empty when it was.
	StateWriteError string `json:"state_write_error,omitempty"`
	// Mode is this aggregator's mode; ModesMixed says that the nodes (or
	// they and this aggregator) do not all run in one mode, and NodeModes
	// counts the nodes by the mode their agents run in.
	Mode       string         `json:"mode"`
	ModesMixed bool           `json:"modes_mixed"`
	NodeModes  map[string]int `json:"node_modes"`
	Detail     string         `json:"detail"`
	// Host is the aggregator's machine ; nil without it. It
	// does not decide readiness.
	Host *report.HostFacts `json:"host,omitempty"`
}

// ClockSkew is a node whose clock disagrees with the aggregator's.
type ClockSkew struct {
	Node string `json:"node"`
	// OffsetSeconds is how far the node's clock is ahead (negative:
	// behind), as measured from its last message.
	OffsetSeconds float64 `json:"ahead_seconds"`
}
