package worker

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFatalKeepsTheFirstError(t *testing.T) {
	f := NewFatal()
	require.NoError(t, f.Check(context.Background()))
	assert.True(t, f.At().IsZero())
	select {
	case <-f.Done():
		t.Fatal("done before any report")
	default:
	}

	first := errors.New("namespace gone")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 0 {
				f.Report(first)
			}
			<-f.Done()
			assert.Equal(t, first, f.Err())
		}()
	}
	wg.Wait()
	at := f.At()
	f.Report(errors.New("later"))
	assert.Equal(t, first, f.Check(context.Background()))
	assert.Equal(t, at, f.At())
	assert.False(t, at.IsZero())
}

func TestSDKOptionsPassOnFatalError(t *testing.T) {
	f := NewFatal()
	o := SDKOptions(Options{OnFatalError: f.Report})
	require.NotNil(t, o.OnFatalError)
	o.OnFatalError(errors.New("boom"))
	assert.EqualError(t, f.Err(), "boom")
	assert.Nil(t, SDKOptions(Options{}).OnFatalError)
}
