// Package subjectcases is the one table of subject validation cases that
// every layer asserts: matcher's validation, and the CRD schema that the
// apiserver enforces. Each case also agrees with nats-server's
// server.IsValidSubject (asserted in matcher's tests).
package subjectcases

import (
	"strings"

	"github.com/weighstation/weighstation/matcher"
)

// Case is one subject, with the rule it breaks (one of matcher's Rule*
// texts; "" when the subject is a valid pattern) and whether it is also a
// valid literal subject.
type Case struct {
	Subject string
	Rule    string
	Literal bool
}

// The rules and limits, as matcher names them.
const (
	RuleEmpty           = matcher.RuleEmpty
	RuleTooLong         = matcher.RuleTooLong
	RuleTooManyTokens   = matcher.RuleTooManyTokens
	RuleEmptyToken      = matcher.RuleEmptyToken
	RuleWhitespace      = matcher.RuleWhitespace
	RuleFullWildcardEnd = matcher.RuleFullWildcardEnd
	MaxLength           = matcher.MaxSubjectLength
	MaxTokens           = matcher.MaxTokens
)

// Cases covers every rule and the edges of both limits.
var Cases = []Case{
	{"foo", "", true},
	{"foo.bar.baz", "", true},
	{"*", "", false},
	{">", "", false},
	{"foo.*", "", false},
	{"foo.>", "", false},
	{"*.bar.>", "", false},
	{"foo*.bar", "", true},
	{"foo>.bar", "", true},
	{"$JS.API.>", "", false},
	{"_INBOX.abc.1", "", true},
	{"a-b_c:d/e", "", true},
	{"日本.語", "", true},
	{"a\vb", "", true},
	{"", RuleEmpty, false},
	{".", RuleEmptyToken, false},
	{"foo.", RuleEmptyToken, false},
	{".foo", RuleEmptyToken, false},
	{"foo..bar", RuleEmptyToken, false},
	{"foo bar", RuleWhitespace, false},
	{"foo.\t", RuleWhitespace, false},
	{"foo\n", RuleWhitespace, false},
	{"\r", RuleWhitespace, false},
	{"a.\f.b", RuleWhitespace, false},
	{">.foo", RuleFullWildcardEnd, false},
	{"foo.>.bar", RuleFullWildcardEnd, false},
	{"foo.>.>", RuleFullWildcardEnd, false},
	{strings.Repeat("a", MaxLength), "", true},
	{strings.Repeat("a", MaxLength+1), RuleTooLong, false},
	{strings.Repeat("a.", MaxTokens-1) + "a", "", true},
	{strings.Repeat("a.", MaxTokens) + "a", RuleTooManyTokens, false},
}
