package a_test

import tt "testing"

func TestExternal(t *tt.T) {}
