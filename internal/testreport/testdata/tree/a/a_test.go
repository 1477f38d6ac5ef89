package a

import "testing"

// TestMain with a *testing.M is the package's main, not a test.
func TestMain(m *testing.M) { m.Run() }

func TestA(t *testing.T) {}

func Test_underscore(t *testing.T) {}

// Testify is no test: a lower-case letter follows Test.
func Testify(t *testing.T) {}

// TestHelper takes no *testing.T: no test (go vet would say so).
func TestHelper(n int) {}

type suite struct{}

// A method is no test.
func (suite) TestMethod(t *testing.T) {}

func FuzzA(f *testing.F) { f.Fuzz(func(t *testing.T, b []byte) {}) }

func BenchmarkA(b *testing.B) {}

func ExampleA() {}
