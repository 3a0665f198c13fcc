package signin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
)

// The argon2id parameters of stored passwords: the second of the
// configurations RFC 9106 and OWASP recommend for memory-constrained
// servers (19 MiB, 2 passes, 1 lane), a 16-byte random salt and a
// 32-byte hash. A stored hash names its parameters, so they can be raised
// later without invalidating existing passwords.
const (
	argonMemoryKiB = 19 * 1024
	argonTime      = 2
	argonThreads   = 1
	argonKeyLen    = 32
	argonSaltLen   = 16
)

// Bounds of a password, in characters and bytes.
const (
	MinPasswordChars = 10
	MaxPasswordBytes = 256
)

// hashSlots bounds how many argon2id hashes run at once, so that a burst
// of sign-ins holds at most hashSlots × 19 MiB.
var hashSlots = make(chan struct{}, 2)

// withHashSlot runs f in one of the hash slots, waiting for one at most
// as long as ctx lasts.
func withHashSlot(ctx context.Context, f func()) error {
	select {
	case hashSlots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-hashSlots }()
	f()
	return nil
}

// CheckPassword refuses a password that is too short, too long or not
// text, naming the parameter param.
func CheckPassword(param, password string) error {
	switch {
	case !utf8.ValidString(password):
		return invalidf("'%s' is not valid UTF-8", param)
	case utf8.RuneCountInString(password) < MinPasswordChars:
		return invalidf("'%s' must be at least %d characters", param, MinPasswordChars)
	case len(password) > MaxPasswordBytes:
		return invalidf("'%s' is longer than %d bytes", param, MaxPasswordBytes)
	}
	return nil
}

// hashPassword returns the PHC string of password's argon2id hash with a
// new salt.
func hashPassword(ctx context.Context, password string) (string, error) {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	var sum []byte
	if err := withHashSlot(ctx, func() {
		sum = argon2.IDKey([]byte(password), salt, argonTime, argonMemoryKiB, argonThreads, argonKeyLen)
	}); err != nil {
		return "", err
	}
	enc := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemoryKiB, argonTime, argonThreads,
		enc.EncodeToString(salt), enc.EncodeToString(sum)), nil
}

// dummyHash is the hash checked for a name no account has, so that a
// sign-in with an unknown name takes as long as one with a wrong
// password.
var dummyHash = func() string {
	h, err := hashPassword(context.Background(), "not the password of any account")
	if err != nil {
		panic("signin: " + err.Error())
	}
	return h
}()

// verifyPassword reports whether password matches the PHC string encoded.
func verifyPassword(ctx context.Context, encoded, password string) (bool, error) {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false, fmt.Errorf("signin: stored password hash is not argon2id")
	}
	var version int
	var memory, passes uint32
	var threads uint8
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, fmt.Errorf("signin: stored password hash has an unknown version")
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &memory, &passes, &threads); err != nil || memory == 0 || memory > 1<<20 || passes == 0 || passes > 10 || threads == 0 {
		return false, fmt.Errorf("signin: stored password hash has bad parameters")
	}
	enc := base64.RawStdEncoding
	salt, err1 := enc.DecodeString(parts[4])
	want, err2 := enc.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(want) == 0 || len(want) > 64 {
		return false, fmt.Errorf("signin: stored password hash is malformed")
	}
	var got []byte
	if err := withHashSlot(ctx, func() {
		got = argon2.IDKey([]byte(password), salt, passes, memory, threads, uint32(len(want)))
	}); err != nil {
		return false, err
	}
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}
