package hidden

import "testing"

func TestHidden(t *testing.T) {}
