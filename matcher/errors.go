package matcher

import "errors"

// ErrInvalidSubject is matched (errors.Is) by every *SubjectError, so callers
// can tell a refused subject from other failures without parsing messages.
var ErrInvalidSubject = errors.New("invalid subject")
