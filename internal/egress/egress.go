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
	// Untrusted marks the policy of the URLs API users give (sources and
	// webhooks created through the API): DenyPrivate is then the negation
	// of api.allow_private and Allow is empty, and a refusal names
	// api.allow_private instead of the operator's egress settings.
	// Defaults to false: the operator's egress policy.
	Untrusted bool
}

// Untrusted returns the policy of the URLs API users give: link-local and
// metadata addresses always refused, loopback and private ones unless
// allowPrivate (api.allow_private), and no exceptions.
func Untrusted(allowPrivate bool) Policy {
	return Policy{DenyPrivate: !allowPrivate, Untrusted: true}
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
	// Reason names the class of the address ("a loopback address").
	Reason string
	// Rule says which setting refused it and what, if anything, would
	// allow it ("refused because egress.deny_private is true; egress.allow
	// can list it").
	Rule string

	untrusted bool
}

func (e *DeniedError) Error() string {
	doc := "egress in docs/config.md"
	if e.untrusted {
		doc = "api.allow_private in docs/config.md"
	}
	return fmt.Sprintf("egress policy refuses connections to %s (%s, %s; see %s)", e.Addr, e.Reason, e.Rule, doc)
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
			return p.denied(ap, "a cloud metadata address", false)
		}
	}
	switch {
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return p.denied(ap, "a link-local address", false)
	case !p.DenyPrivate:
		return nil
	case ip.IsLoopback():
		return p.denied(ap, "a loopback address", true)
	case ip.IsUnspecified():
		return p.denied(ap, "an unspecified address", true)
	case ip.IsPrivate() || shared.Contains(ip):
		return p.denied(ap, "a private address", true)
	}
	return nil
}

// denied is the refusal of ap, of the class reason; private says that
// DenyPrivate refused it (rather than the rule on link-local and metadata
// addresses that always applies). Its Rule names the setting that refused
// and what would allow the address.
func (p Policy) denied(ap netip.AddrPort, reason string, private bool) *DeniedError {
	var rule string
	switch {
	case p.Untrusted && private:
		rule = "refused for sources and webhooks created through the API because api.allow_private is false; the operator may set it true"
	case p.Untrusted:
		rule = "never allowed for sources and webhooks created through the API, whatever api.allow_private and egress.allow say"
	case private:
		rule = "refused because egress.deny_private is true; egress.allow can list it"
	case reason == "a cloud metadata address":
		rule = "refused by default; egress.allow can list it, at your own risk"
	default:
		rule = "refused by default; egress.allow can list it"
	}
	return &DeniedError{Addr: ap, Reason: reason, Rule: rule, untrusted: p.Untrusted}
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
