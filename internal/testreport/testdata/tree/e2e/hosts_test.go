//go:build integration && temporalhosts

package e2e

import "testing"

func TestHostLoss(t *testing.T) {}
