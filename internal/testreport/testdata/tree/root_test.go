package m

import "testing"

func TestRoot(t *testing.T) {}
