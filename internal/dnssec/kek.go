package dnssec

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// KEK is the key-encryption key a member seals the zones' private keys
// with before they go into the replicated store: AES-256-GCM, from a file
// every member of the group has (32 random bytes, base64, one line).
type KEK struct {
	aead cipher.AEAD
	id   [8]byte // the first bytes of the key's SHA-256: which KEK sealed a key
}

// kekLen is the key's length in bytes (AES-256).
const kekLen = 32

// LoadKEK reads the key-encryption key from path. It refuses a file that
// is missing, is readable by others than its owner, or does not hold
// base64 of 32 bytes, naming the file.
func LoadKEK(path string) (*KEK, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("key-encryption key %s: %w", path, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("key-encryption key %s: readable by others (mode %v): chmod 600", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("key-encryption key %s: %w", path, err)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(raw) != kekLen {
		return nil, fmt.Errorf("key-encryption key %s: not base64 of %d bytes (head -c %d /dev/urandom | base64 > %s)", path, kekLen, kekLen, path)
	}
	return newKEK(raw)
}

// CreateKEK writes a new key-encryption key to path (mode 0600), failing
// when the file exists.
func CreateKEK(path string) error {
	raw := make([]byte, kekLen)
	if _, err := rand.Read(raw); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("key-encryption key %s: %w", path, err)
	}
	if _, err := f.WriteString(base64.StdEncoding.EncodeToString(raw) + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("key-encryption key %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("key-encryption key %s: %w", path, err)
	}
	return f.Close()
}

func newKEK(raw []byte) (*KEK, error) {
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	k := &KEK{aead: aead}
	sum := sha256.Sum256(raw)
	copy(k.id[:], sum[:])
	return k, nil
}

// sealVersion is the first byte of a sealed key.
const sealVersion = 1

// ErrOtherKEK is a sealed key made with another key-encryption key.
var ErrOtherKEK = errors.New("sealed with another key-encryption key than this member's")

// Seal encrypts plaintext (a private key) bound to ad (what it belongs to:
// the zone and the key's tag and flags), so that it cannot be opened as
// another zone's or another key's. A new random nonce each time.
func (k *KEK) Seal(plaintext, ad []byte) []byte {
	out := make([]byte, 0, 1+len(k.id)+k.aead.NonceSize()+len(plaintext)+k.aead.Overhead())
	out = append(out, sealVersion)
	out = append(out, k.id[:]...)
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand does not fail
	}
	out = append(out, nonce...)
	return k.aead.Seal(out, nonce, plaintext, ad)
}

// Open decrypts what Seal made with the same ad.
func (k *KEK) Open(sealed, ad []byte) ([]byte, error) {
	head := 1 + len(k.id) + k.aead.NonceSize()
	if len(sealed) < head+k.aead.Overhead() || sealed[0] != sealVersion {
		return nil, errors.New("not a sealed key")
	}
	if !bytes.Equal(sealed[1:1+len(k.id)], k.id[:]) {
		return nil, ErrOtherKEK
	}
	p, err := k.aead.Open(nil, sealed[1+len(k.id):head], sealed[head:], ad)
	if err != nil {
		return nil, errors.New("sealed key does not open: corrupt, or another zone's or key's")
	}
	return p, nil
}
