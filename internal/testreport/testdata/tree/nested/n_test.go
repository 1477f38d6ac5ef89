package nested

import "testing"

func TestNestedModule(t *testing.T) {}
