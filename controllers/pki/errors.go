package pki

import "errors"

// Errors that callers and tests match with errors.Is.
var (
	// ErrNotReady is returned by GetCertificate (and reported by
	// ReadyCheck) until the first Ensure has succeeded.
	ErrNotReady = errors.New("no serving certificate yet: the CA has not been loaded")
	// ErrInvalidSecret means the CA Secret holds data that this package
	// would not have written. The operator refuses to replace it, because
	// that would distrust every certificate in use. A person has to repair
	// the Secret or delete it, and deleting it is a hard reset: every
	// sidecar must receive the new bundle before it trusts the operator
	// again.
	ErrInvalidSecret = errors.New("the CA Secret holds data the operator did not write")
	// ErrInvalidBundle is returned by PublishBundle for a bundle that holds
	// no certificate. Publishing it would make every sidecar in the
	// namespace distrust the operator.
	ErrInvalidBundle = errors.New("not a PEM bundle of CA certificates")
)
