// Package secrets encrypts the secrets lookout keeps for API users (the
// credentials of sources created through the API, the signing secrets of
// their webhooks, answers replayed for an Idempotency-Key) with AES-256-GCM
// under keys from the environment.
//
// The key ring is LOOKOUT_SECRET_KEY: one or more "id:key" entries
// separated by commas, each key 32 bytes in base64 (standard or URL
// alphabet, padded or not). The first entry encrypts; every entry
// decrypts, so a key is rotated by putting the new one first and keeping
// the old one until everything was re-sealed. A sealed value names its key:
// "v1:<id>:<base64url(nonce|ciphertext)>". Sealing binds the value to a
// context string (what it is and whose), so a ciphertext copied to another
// row does not open.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// KeyEnv is the environment variable that holds the key ring.
const KeyEnv = "LOOKOUT_SECRET_KEY"

// ErrNoKey is returned when a secret must be sealed and no key ring is set.
var ErrNoKey = errors.New(KeyEnv + " is not set: lookout needs it to store secrets of API users encrypted (generate one with `api secret-key`)")

// Ring is a set of keys: the first seals, all open.
type Ring struct {
	ids   []string
	aeads map[string]cipher.AEAD
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// Parse reads a key ring ("id:base64key[,id:base64key...]").
func Parse(s string) (*Ring, error) {
	r := &Ring{aeads: map[string]cipher.AEAD{}}
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		id, b64, ok := strings.Cut(entry, ":")
		if !ok || !idRE.MatchString(id) {
			return nil, fmt.Errorf("%s entry %d: want id:base64key with an id of letters, digits, - or _ (e.g. k1:%s)", KeyEnv, i+1, strings.Repeat("A", 43))
		}
		key, err := decodeKey(b64)
		if err != nil {
			return nil, fmt.Errorf("%s entry %d (%s): %w", KeyEnv, i+1, id, err)
		}
		if _, dup := r.aeads[id]; dup {
			return nil, fmt.Errorf("%s entry %d: key id %s appears twice", KeyEnv, i+1, id)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("%s entry %d (%s): %w", KeyEnv, i+1, id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("%s entry %d (%s): %w", KeyEnv, i+1, id, err)
		}
		r.ids = append(r.ids, id)
		r.aeads[id] = aead
	}
	return r, nil
}

func decodeKey(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != 32 {
				return nil, fmt.Errorf("key is %d bytes, want 32 (AES-256)", len(b))
			}
			return b, nil
		}
	}
	return nil, errors.New("key is not base64")
}

// FromEnv reads the key ring of LOOKOUT_SECRET_KEY; it returns nil (and no
// error) when the variable is unset or empty.
func FromEnv() (*Ring, error) {
	v := os.Getenv(KeyEnv)
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	return Parse(v)
}

// NewKey returns a fresh key in the ring's format, for `api secret-key`.
func NewKey(id string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random key: %w", err)
	}
	return id + ":" + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// KeyID is the id of the key that seals.
func (r *Ring) KeyID() string { return r.ids[0] }

// Seal encrypts plaintext under the first key, bound to context.
func (r *Ring) Seal(plaintext []byte, context string) (string, error) {
	if r == nil {
		return "", ErrNoKey
	}
	id := r.ids[0]
	aead := r.aeads[id]
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal: random nonce: %w", err)
	}
	out := aead.Seal(nonce, nonce, plaintext, []byte(context))
	return "v1:" + id + ":" + base64.RawURLEncoding.EncodeToString(out), nil
}

// Open decrypts a value Seal made with any key of the ring and the same
// context.
func (r *Ring) Open(sealed, context string) ([]byte, error) {
	if r == nil {
		return nil, ErrNoKey
	}
	parts := strings.SplitN(sealed, ":", 3)
	if len(parts) != 3 || parts[0] != "v1" {
		return nil, errors.New("open sealed secret: not a v1 sealed value")
	}
	aead, ok := r.aeads[parts[1]]
	if !ok {
		return nil, fmt.Errorf("open sealed secret: key %q is not in %s (keep retired keys in the ring until every secret was re-sealed)", parts[1], KeyEnv)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(b) < aead.NonceSize() {
		return nil, errors.New("open sealed secret: malformed ciphertext")
	}
	out, err := aead.Open(nil, b[:aead.NonceSize()], b[aead.NonceSize():], []byte(context))
	if err != nil {
		return nil, fmt.Errorf("open sealed secret with key %s: %w", parts[1], err)
	}
	return out, nil
}

// KeyOf returns the id of the key that sealed a value ("" when it is not
// a sealed value), so that a rotation can find what to re-seal.
func KeyOf(sealed string) string {
	parts := strings.SplitN(sealed, ":", 3)
	if len(parts) != 3 || parts[0] != "v1" {
		return ""
	}
	return parts[1]
}
