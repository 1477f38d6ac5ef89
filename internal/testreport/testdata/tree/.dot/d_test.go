package dot

import "testing"

func TestDot(t *testing.T) {}
