// Package nodelog holds the bound of the aggregator's log lines that the
// nodes' input can cause: every line about one node takes from that node's
// budget, so that one node that flips its state in every update cannot
// flood the log (docs/DESIGN.md §6).
package nodelog
