// Package egress is the policy on where lookout's outbound HTTP requests
// (connectors, webhook and Slack sinks) and the imap connector's
// connections may connect. It checks the IP
// address actually dialed, after DNS resolution and after every redirect,
// in a net.Dialer Control function: a refused connection fails before any
// packet is sent, and a name that resolves to a refused address (DNS
// rebinding, a redirect to a metadata endpoint) is refused like the
// address itself.
//
// By default link-local addresses (169.254.0.0/16, fe80::/10) and the
// cloud metadata endpoints (169.254.169.254, fd00:ec2::254,
// 100.100.100.200, 192.0.0.192) are refused; loopback and private ranges
// are allowed unless DenyPrivate is set. Allow lists exceptions that are
// always allowed.
package egress

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// Policy decides which addresses outbound connections may reach. The zero
// Policy is the default: link-local and metadata addresses refused,
// everything else allowed.
type Policy struct {
	// DenyPrivate also refuses loopback (127.0.0.0/8, ::1), unspecified
	// (0.0.0.0, ::), private (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16,
	// fc00::/7) and shared (100.64.0.0/10) addresses. Defaults to false.
	DenyPrivate bool
	// Allow lists prefixes that are allowed whatever the other rules say,
	// e.g. one internal API's 10.1.2.0/24 under DenyPrivate. Defaults to none.
	Allow []netip.Prefix
}

// metadata are cloud instance-metadata endpoints: AWS, GCP, Azure,
// OpenStack, DigitalOcean (169.254.169.254), AWS over IPv6
// (fd00:ec2::254), Alibaba Cloud (100.100.100.200), Oracle Cloud's legacy
// endpoint (192.0.0.192).
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
	netip.MustParseAddr("192.0.0.192"),
}

var shared = netip.MustParsePrefix("100.64.0.0/10")

// DeniedError is a connection the policy refused.
type DeniedError struct {
	// Addr is the refused address and port.
	Addr netip.AddrPort
	// Reason names the class of the address.
	Reason string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("egress policy refuses connections to %s (%s; see egress in docs/config.md)", e.Addr, e.Reason)
}

// Check returns a *DeniedError when the policy refuses ip, else nil.
func (p Policy) Check(ip netip.Addr) error {
	return p.check(netip.AddrPortFrom(ip, 0))
}

func (p Policy) check(ap netip.AddrPort) error {
	ip := ap.Addr().Unmap().WithZone("")
	for _, pre := range p.Allow {
		if pre.Contains(ip) {
			return nil
		}
	}
	for _, m := range metadata {
		if ip == m {
			return &DeniedError{Addr: ap, Reason: "a cloud metadata address"}
		}
	}
	switch {
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return &DeniedError{Addr: ap, Reason: "a link-local address"}
	case !p.DenyPrivate:
		return nil
	case ip.IsLoopback():
		return &DeniedError{Addr: ap, Reason: "a loopback address, and egress.deny_private is set"}
	case ip.IsUnspecified():
		return &DeniedError{Addr: ap, Reason: "an unspecified address, and egress.deny_private is set"}
	case ip.IsPrivate() || shared.Contains(ip):
		return &DeniedError{Addr: ap, Reason: "a private address, and egress.deny_private is set"}
	}
	return nil
}

// Control is a net.Dialer Control function: it refuses a connection to an
// address the policy denies, before the connection is attempted.
func (p Policy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("egress policy: dial %s %q: not an IP address and port: %w", network, address, err)
	}
	return p.check(ap)
}

// Dialer returns a dialer that applies the policy, with the timeouts of
// http.DefaultTransport's.
func (p Policy) Dialer() *net.Dialer {
	return &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: p.Control}
}

// Transport returns a clone of http.DefaultTransport (proxy from the
// environment, HTTP/2, idle pools) that dials through the policy's
// dialer. Behind a proxy the policy applies to the proxy's address.
func (p Policy) Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = p.Dialer().DialContext
	return t
}
