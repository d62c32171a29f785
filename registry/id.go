package registry

import "errors"

// CheckID returns why id cannot name a provider (too long, reserved, or
// a character outside lowercase letters, digits, '-', '_' and '.'), or nil.
// Other packages that propose provider ids (the catalog) check theirs with
// it, so that an id they propose is one a providers file accepts.
func CheckID(id string) error {
	if msg := checkID(id); msg != "" {
		return errors.New(msg)
	}
	return nil
}
