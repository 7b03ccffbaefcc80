package main

import (
	"regexp"
	"strings"
)

// refusalKind is what a sidecar's -ERR refused, as nats.go's asynchronous
// error handler reports it (always without the subscription).
type refusalKind int

const (
	notRefusal refusalKind = iota
	refusedPublish
	refusedSubscription
)

var (
	refusedSubscriptionRe = regexp.MustCompile(`(?i)permissions violation for subscription to "([^"]+)"`)
	refusedPublishRe      = regexp.MustCompile(`(?i)permissions violation for publish to "([^"]+)"`)
)

// classifyRefusal reads an asynchronous error's text: a Permissions
// Violation for a publish or for a subscription, and its subject.
func classifyRefusal(text string) (refusalKind, string) {
	if m := refusedSubscriptionRe.FindStringSubmatch(text); m != nil {
		return refusedSubscription, m[1]
	}
	if m := refusedPublishRe.FindStringSubmatch(text); m != nil {
		return refusedPublish, m[1]
	}
	if strings.Contains(strings.ToLower(text), "permissions violation") {
		return refusedPublish, "" // a refusal that names no subject: count it with the publishes
	}
	return notRefusal, ""
}
