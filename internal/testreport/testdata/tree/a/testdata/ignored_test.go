package ignored

import "testing"

func TestInTestdata(t *testing.T) {}
