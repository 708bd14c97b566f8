package pgtest

import (
	"io"
	"net"
	neturl "net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy in front of the test database, for outages under
// the test's control: Cut closes every connection through it and refuses
// new ones (as a restarting server does) until Restore.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}

	// Refused counts connections refused while the proxy was cut.
	Refused atomic.Int64
	wg      sync.WaitGroup
}

// NewProxy starts a proxy to url's host and returns it with url rewritten
// to go through it. It stops when the test ends.
func NewProxy(t testing.TB, url string) (*Proxy, string) {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatalf("pgtest: proxy: parse the database URL: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: proxy: %v", err)
	}
	p := &Proxy{ln: ln, upstream: u.Host, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			p.Refused.Add(1)
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			p.Refused.Add(1)
			_ = c.Close()
			_ = up.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		p.wg.Go(func() { pipe(up, c) })
		p.wg.Go(func() { pipe(c, up) })
	}
}

// Cut closes every open connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Restore accepts connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
