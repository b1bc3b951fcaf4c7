package sim

import (
	"net"
	"sync"
)

// gate is a node's port 50000. The socket stays bound for the cluster's lifetime; while the
// node is down (rebooting, reset, or Unreachable) accepted connections are parked unanswered,
// so a caller's dial or TLS handshake waits until its own deadline, as it does against a
// powered-off or cut-off machine (apid's backend dial: internal/app/apid/pkg/backend/apid.go,
// MinConnectTimeout 20s). When the node comes back, parked connections are handed to its new
// server, as a retransmitted SYN would reach the booted machine.
type gate struct {
	lis net.Listener

	mu     sync.Mutex
	up     *chanListener
	parked []net.Conn
	closed bool
}

func newGate(lis net.Listener) *gate {
	g := &gate{lis: lis}

	go g.acceptLoop()

	return g
}

func (g *gate) acceptLoop() {
	for {
		conn, err := g.lis.Accept()
		if err != nil {
			return
		}

		g.mu.Lock()

		switch {
		case g.closed:
			_ = conn.Close()
		case g.up != nil:
			g.up.deliver(conn)
		default:
			g.parked = append(g.parked, conn)
		}

		g.mu.Unlock()
	}
}

// open returns a listener for the node's new server and hands it the parked connections.
func (g *gate) open() net.Listener {
	g.mu.Lock()
	defer g.mu.Unlock()

	cl := &chanListener{addr: g.lis.Addr(), ch: make(chan net.Conn, 64), done: make(chan struct{})}
	g.up = cl

	for _, c := range g.parked {
		cl.deliver(c)
	}

	g.parked = nil

	return cl
}

// shut makes the node unreachable: new connections are parked from now on.
func (g *gate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()

	g.up = nil
}

// close releases the socket and every parked connection (cluster shutdown).
func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	parked := g.parked
	g.parked = nil
	g.up = nil
	g.mu.Unlock()

	_ = g.lis.Close()

	for _, c := range parked {
		_ = c.Close()
	}
}

// chanListener is the net.Listener one incarnation of the node's gRPC server accepts from.
type chanListener struct {
	addr net.Addr
	ch   chan net.Conn

	once sync.Once
	done chan struct{}
}

func (l *chanListener) deliver(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		_ = c.Close()
	default:
		// The server is not accepting fast enough: hand over without blocking the gate.
		go func() {
			select {
			case l.ch <- c:
			case <-l.done:
				_ = c.Close()
			}
		}()
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })

	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
