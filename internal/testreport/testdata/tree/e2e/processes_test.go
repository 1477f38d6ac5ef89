//go:build integration && processes

package e2e

import "testing"

func TestAcrossProcesses(t *testing.T) {}

func TestAcrossProcessesWithKills(t *testing.T) {}
