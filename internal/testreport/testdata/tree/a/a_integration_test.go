//go:build integration

package a

import "testing"

func TestIntegrationA(t *testing.T) {}

func FuzzIntegration(f *testing.F) { f.Fuzz(func(t *testing.T, s string) {}) }
