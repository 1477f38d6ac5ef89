package broker

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplitURLs(t *testing.T) {
	got, err := SplitURLs(" amqp://u:p@a:5672/ ,amqps://u:p@b/vh")
	require.NoError(t, err)
	assert.Equal(t, []string{"amqp://u:p@a:5672/", "amqps://u:p@b/vh"}, got)

	got, err = SplitURLs("amqp://localhost/")
	require.NoError(t, err)
	assert.Equal(t, []string{"amqp://localhost/"}, got)
}

func TestSplitURLsRejects(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "empty URL"},
		{"amqp://u:topsecret@a/,", "URL 2 of 2: empty URL"},
		{"amqp://u:topsecret@a/,,amqp://b/", "URL 2 of 3: empty URL"},
		{"http://u:topsecret@a:80/", `scheme "http" is not amqp or amqps (a:80)`},
		{"amqp://u:topsecret@a/,amqp:///vh", "URL 2 of 2: no host (amqp:///vh)"},
		{"amqp://u:topsecret%zz@a/", "not a URL"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, err := SplitURLs(tc.in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "topsecret")
		})
	}
	// Every bad element is reported at once.
	_, err := SplitURLs("ftp://a/,,amqp://b/")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "URL 1 of 3")
	assert.Contains(t, err.Error(), "URL 2 of 3")
	assert.NotContains(t, err.Error(), "URL 3 of 3")
}

func TestAddr(t *testing.T) {
	assert.Equal(t, "a:5672", Addr("amqp://u:secret@a/"))
	assert.Equal(t, "a:5671", Addr("amqps://u:secret@a/"))
	assert.Equal(t, "a:1234", Addr("amqp://a:1234/vh"))
	assert.Equal(t, "[::1]:5672", Addr("amqp://[::1]/"))
	assert.Equal(t, UnparseableURL, Addr("amqp://u:pa%zz@a/"))
	assert.Equal(t, "a:5672,b:7", Addrs("amqp://u:secret@a/, amqp://b:7/"))
}

// Each dial tries the brokers in a new random order, so that every one comes first now and
// then (clients spread over a cluster's nodes) and none is dropped or repeated.
func TestShuffledOrder(t *testing.T) {
	urls := []string{"amqp://a/", "amqp://b/", "amqp://c/"}
	first := map[string]int{}
	for range 300 {
		got := shuffled(urls)
		assert.ElementsMatch(t, urls, got)
		first[got[0]]++
	}
	for _, u := range urls {
		// Each comes first 100 times on average; below 40 has odds under 1e-12.
		assert.Greater(t, first[u], 40, "%s first %d times in 300", u, first[u])
	}
	assert.Equal(t, []string{"amqp://a/", "amqp://b/", "amqp://c/"}, urls, "the caller's slice is left alone")
}

// A Dial that no broker accepts has tried every one, and says so naming each by host:port,
// never with its password.
func TestDialTriesEveryBroker(t *testing.T) {
	var addrs, urls []string
	for range 3 {
		port := closedPort(t)
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(port))
		urls = append(urls, "amqp://svc:topsecret@127.0.0.1:"+strconv.Itoa(port)+"/")
	}
	_, err := Dial(Config{URL: strings.Join(urls, ","), DialTimeout: 2 * time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no broker of 3 accepted")
	for _, a := range addrs {
		assert.Contains(t, err.Error(), "dial "+a+":")
	}
	assert.NotContains(t, err.Error(), "topsecret")
}

// A Dial skips a broker that refuses the connection and opens one on the next: an AMQP
// handshake reaches the listening address.
func TestDialSkipsAnUnreachableBroker(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	reached := make(chan struct{}, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			reached <- struct{}{}
			_ = c.Close() // no AMQP here: the dial fails after reaching it
		}
	}()
	closed := "amqp://svc:topsecret@127.0.0.1:" + strconv.Itoa(closedPort(t)) + "/"
	open := "amqp://svc:topsecret@" + l.Addr().String() + "/"
	for range 4 { // either order
		_, err := Dial(Config{URL: closed + "," + open, DialTimeout: 2 * time.Second})
		require.Error(t, err)
		select {
		case <-reached:
		default:
			t.Fatalf("the listening broker was not tried: %v", err)
		}
		assert.Contains(t, err.Error(), l.Addr().String())
	}
}

// closedPort is a loopback port nothing listens on (just released by the kernel).
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}
