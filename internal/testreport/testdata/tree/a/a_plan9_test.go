package a

import "testing"

func TestOnPlan9(t *testing.T) {}
