//go:build !integration

package a

import "testing"

func TestUnitOnly(t *testing.T) {}
