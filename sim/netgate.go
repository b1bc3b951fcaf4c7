package sim

import (
	"fmt"
	"net"
	"sync"
)

// gate is a node's port 50000. While the node is off or cut off (reset, Unreachable, held down
// by NeverReturn) the socket stays bound and accepted connections are parked unanswered, so a
// caller's dial or TLS handshake waits until its own deadline, as against a powered-off machine
// (apid's backend dial: internal/app/apid/pkg/backend/apid.go, MinConnectTimeout 20s). While it
// reboots, the socket is unbound and connections are refused, as a booting machine whose apid is
// not listening yet refuses them. When the node answers again, parked connections are handed to
// its new server, as a retransmitted SYN would reach the booted machine.
type gate struct {
	addr string

	mu     sync.Mutex
	lis    net.Listener // nil while refusing
	up     *chanListener
	parked []net.Conn
	closed bool
}

func newGate(lis net.Listener) *gate {
	g := &gate{addr: lis.Addr().String(), lis: lis}

	go g.acceptLoop(lis)

	return g
}

func (g *gate) acceptLoop(lis net.Listener) {
	for {
		conn, err := lis.Accept()
		if err != nil {
			return
		}

		g.mu.Lock()

		switch {
		case g.closed || g.lis != lis:
			_ = conn.Close()
		case g.up != nil:
			g.up.deliver(conn)
		default:
			g.parked = append(g.parked, conn)
		}

		g.mu.Unlock()
	}
}

// bindLocked binds the socket again after refusing. Caller holds mu.
func (g *gate) bindLocked() error {
	if g.lis != nil || g.closed {
		return nil
	}

	lis, err := net.Listen("tcp", g.addr)
	if err != nil {
		return fmt.Errorf("rebind %s: %w", g.addr, err)
	}

	g.lis = lis

	go g.acceptLoop(lis)

	return nil
}

// open returns a listener for the node's new server and hands it the parked connections.
func (g *gate) open() (net.Listener, error) {
	g.mu.Lock()
	defer g.mu.Unlock()

	if err := g.bindLocked(); err != nil {
		return nil, err
	}

	if g.closed {
		return nil, net.ErrClosed
	}

	cl := &chanListener{addr: g.lis.Addr(), ch: make(chan net.Conn, 64), done: make(chan struct{})}
	g.up = cl

	for _, c := range g.parked {
		cl.deliver(c)
	}

	g.parked = nil

	return cl, nil
}

// shut makes the node stop answering: new connections are parked from now on.
func (g *gate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()

	g.up = nil
}

// refusing makes a down node refuse connections (true: rebooting; the socket is unbound and
// parked connections are dropped) or park them (false: off, the socket is bound again).
func (g *gate) refusing(v bool) {
	g.mu.Lock()
	defer g.mu.Unlock()

	if !v {
		_ = g.bindLocked()

		return
	}

	if g.lis != nil {
		_ = g.lis.Close()
		g.lis = nil
	}

	for _, c := range g.parked {
		_ = c.Close()
	}

	g.parked = nil
}

// close releases the socket and every parked connection (cluster shutdown).
func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	parked := g.parked
	g.parked = nil
	g.up = nil
	lis := g.lis
	g.lis = nil
	g.mu.Unlock()

	if lis != nil {
		_ = lis.Close()
	}

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
