//go:build integration

package e2e

import "testing"

func TestEndToEnd(t *testing.T) {}
