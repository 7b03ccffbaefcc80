package meshconfig

// Equality of policies, field by field: the operator compares a pod's
// policies with those it already publishes for every pod it recomputes,
// and reflection or a protobuf comparison per policy costs a namespace of
// thousands of Topics seconds. equal_test.go fails when a field is added
// that these functions do not compare.

// Equal reports whether p and o are the same policy.
func (p TopicPolicy) Equal(o TopicPolicy) bool {
	return p.Name == o.Name && p.Subject == o.Subject && p.MaxMessageBytes == o.MaxMessageBytes &&
		p.MayPublish == o.MayPublish &&
		p.StampHeader == o.StampHeader && equalPointed(p.PublishRate, o.PublishRate)
}

// Equal reports whether p and o are the same policy.
func (p SubscriptionPolicy) Equal(o SubscriptionPolicy) bool {
	return p.Name == o.Name && p.Subject == o.Subject && p.QueueGroup == o.QueueGroup && p.Essential == o.Essential &&
		p.Limits == o.Limits && p.KillSwitch.Engaged == o.KillSwitch.Engaged && p.KillSwitch.Reason == o.KillSwitch.Reason &&
		equalPointed(p.KillSwitch.Auto, o.KillSwitch.Auto)
}

// equalPointed compares what two pointers to comparable values point to.
func equalPointed[T comparable](a, b *T) bool {
	if a == b {
		return true
	}
	if a == nil || b == nil {
		return false
	}
	return *a == *b
}
