package secrets

import (
	"strings"
	"testing"
)

func TestSealOpenRotate(t *testing.T) {
	k1, err := NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := NewKey("k2")
	old, err := Parse(k1)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := old.Seal([]byte("ghp_secret"), "source:alice/repo:token")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, "ghp_secret") || KeyOf(sealed) != "k1" {
		t.Fatalf("sealed = %q", sealed)
	}
	// Rotation: k2 seals, k1 still opens.
	rotated, err := Parse(k2 + "," + k1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := rotated.Open(sealed, "source:alice/repo:token")
	if err != nil || string(got) != "ghp_secret" {
		t.Fatalf("open after rotation = %q, %v", got, err)
	}
	resealed, _ := rotated.Seal(got, "source:alice/repo:token")
	if KeyOf(resealed) != "k2" {
		t.Errorf("reseal used %s, want k2", KeyOf(resealed))
	}
	// Another context does not open: a ciphertext copied to another row.
	if _, err := rotated.Open(sealed, "source:bob/repo:token"); err == nil {
		t.Error("opened under another context")
	}
	// A ring without the sealing key says which key is missing.
	only2, _ := Parse(k2)
	if _, err := only2.Open(sealed, "source:alice/repo:token"); err == nil || !strings.Contains(err.Error(), `key "k1" is not in LOOKOUT_SECRET_KEY`) {
		t.Errorf("open without k1: %v", err)
	}
	var none *Ring
	if _, err := none.Seal([]byte("x"), "c"); err != ErrNoKey {
		t.Errorf("nil ring seal: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	for in, want := range map[string]string{
		"nokey":                        "entry 1: want id:base64key",
		"k1:shortkey":                  "entry 1 (k1): key is 6 bytes, want 32",
		"k1:!!!":                       "entry 1 (k1): key is not base64",
		"k1:" + key32 + ",k1:" + key32: "entry 2: key id k1 appears twice",
	} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want %q", in, err, want)
		}
	}
}

const key32 = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
