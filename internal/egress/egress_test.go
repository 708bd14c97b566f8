package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"syscall"
	"testing"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	allow := []netip.Prefix{netip.MustParsePrefix("10.1.2.0/24"), netip.MustParsePrefix("169.254.169.254/32")}
	for _, tc := range []struct {
		ip                          string
		deflt, denyPrivate, allowed bool // allowed by Policy{}, {DenyPrivate}, {DenyPrivate, Allow}
	}{
		{"169.254.169.254", false, false, true},
		{"169.254.1.1", false, false, false},
		{"::ffff:169.254.169.254", false, false, true},
		{"fe80::1", false, false, false},
		{"fd00:ec2::254", false, false, false},
		{"100.100.100.200", false, false, false},
		{"192.0.0.192", false, false, false},
		{"127.0.0.1", true, false, false},
		{"::1", true, false, false},
		{"0.0.0.0", true, false, false},
		{"10.1.2.3", true, false, true},
		{"10.9.9.9", true, false, false},
		{"172.16.0.1", true, false, false},
		{"192.168.1.1", true, false, false},
		{"100.64.0.1", true, false, false},
		{"fd12::1", true, false, false},
		{"93.184.216.34", true, true, true},
		{"2606:4700::1111", true, true, true},
	} {
		ip := netip.MustParseAddr(tc.ip)
		for i, p := range []Policy{{}, {DenyPrivate: true}, {DenyPrivate: true, Allow: allow}} {
			want := []bool{tc.deflt, tc.denyPrivate, tc.allowed}[i]
			err := p.Check(ip)
			var de *DeniedError
			if (err == nil) != want || (err != nil && !errors.As(err, &de)) {
				t.Errorf("%+v.Check(%s) = %v, want allowed %t", p, tc.ip, err, want)
			}
		}
	}
}

// TestDialRefusedBeforeConnecting: the dialer refuses the metadata address
// in its Control function, after the socket exists and before connect: no
// packet leaves. The error is a *DeniedError naming the address.
func TestDialRefusedBeforeConnecting(t *testing.T) {
	t.Parallel()
	d := Policy{}.Dialer()
	policy := d.Control
	var sawAddress string
	d.Control = func(network, address string, c syscall.RawConn) error {
		sawAddress = address
		return policy(network, address, c)
	}
	_, err := d.DialContext(context.Background(), "tcp4", "169.254.169.254:80")
	var de *DeniedError
	if !errors.As(err, &de) || de.Addr.String() != "169.254.169.254:80" || !strings.Contains(err.Error(), "cloud metadata") {
		t.Fatalf("dial metadata: %v, want a *DeniedError for 169.254.169.254:80", err)
	}
	if sawAddress != "169.254.169.254:80" {
		t.Fatalf("control saw %q", sawAddress)
	}
}

// TestTransport: over HTTP, a loopback server is reached by default and
// refused with deny_private — by name ("localhost") as by address, since
// the check is on the dialed IP — unless allow lists it; a redirect from
// an allowed server to the metadata address is refused when it is dialed.
func TestTransport(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metadata" {
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/iam/", http.StatusFound)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(srv.Close)
	byName := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	get := func(p Policy, url string) error {
		tr := p.Transport()
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	deny := Policy{DenyPrivate: true}
	allow := Policy{DenyPrivate: true, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
	for _, tc := range []struct {
		name   string
		p      Policy
		url    string
		denied bool
	}{
		{"default", Policy{}, srv.URL, false},
		{"default by name", Policy{}, byName, false},
		{"deny_private", deny, srv.URL, true},
		{"deny_private by name", deny, byName, true},
		{"deny_private with allow", allow, byName, false},
		{"redirect to metadata", Policy{}, srv.URL + "/metadata", true},
	} {
		err := get(tc.p, tc.url)
		var de *DeniedError
		if got := errors.As(err, &de); got != tc.denied || (!tc.denied && err != nil) {
			t.Errorf("%s: GET %s: %v, want denied %t", tc.name, tc.url, err, tc.denied)
		}
	}
}

// TestRefusalNamesTheSetting: a refusal names the setting that refused
// (egress.deny_private for the operator's policy, api.allow_private for
// the URLs of API users — never deny_private when it is false) and what
// could unlock the address, or that nothing can.
func TestRefusalNamesTheSetting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		p    Policy
		ip   string
		want string
	}{
		{"operator metadata", Policy{}, "169.254.169.254",
			"egress policy refuses connections to 169.254.169.254:0 (a cloud metadata address, refused by default; egress.allow can list it, at your own risk; see egress in docs/config.md)"},
		{"operator link-local", Policy{}, "169.254.1.1",
			"egress policy refuses connections to 169.254.1.1:0 (a link-local address, refused by default; egress.allow can list it; see egress in docs/config.md)"},
		{"operator loopback", Policy{DenyPrivate: true}, "127.0.0.1",
			"egress policy refuses connections to 127.0.0.1:0 (a loopback address, refused because egress.deny_private is true; egress.allow can list it; see egress in docs/config.md)"},
		{"operator private", Policy{DenyPrivate: true}, "10.0.0.1",
			"egress policy refuses connections to 10.0.0.1:0 (a private address, refused because egress.deny_private is true; egress.allow can list it; see egress in docs/config.md)"},
		{"api loopback", Untrusted(false), "127.0.0.1",
			"egress policy refuses connections to 127.0.0.1:0 (a loopback address, refused for sources and webhooks created through the API because api.allow_private is false; the operator may set it true; see api.allow_private in docs/config.md)"},
		{"api unspecified", Untrusted(false), "0.0.0.0",
			"egress policy refuses connections to 0.0.0.0:0 (an unspecified address, refused for sources and webhooks created through the API because api.allow_private is false; the operator may set it true; see api.allow_private in docs/config.md)"},
		{"api metadata", Untrusted(true), "169.254.169.254",
			"egress policy refuses connections to 169.254.169.254:0 (a cloud metadata address, never allowed for sources and webhooks created through the API, whatever api.allow_private and egress.allow say; see api.allow_private in docs/config.md)"},
		{"api link-local", Untrusted(false), "fe80::1",
			"egress policy refuses connections to [fe80::1]:0 (a link-local address, never allowed for sources and webhooks created through the API, whatever api.allow_private and egress.allow say; see api.allow_private in docs/config.md)"},
	} {
		err := tc.p.Check(netip.MustParseAddr(tc.ip))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v\nwant %s", tc.name, err, tc.want)
		}
		var de *DeniedError
		if !errors.As(err, &de) {
			t.Errorf("%s: %T, want a *DeniedError", tc.name, err)
		}
	}
	if err := Untrusted(true).Check(netip.MustParseAddr("127.0.0.1")); err != nil {
		t.Errorf("api.allow_private true, loopback: %v", err)
	}
}
