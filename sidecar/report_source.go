package sidecar

// ConfiguredPolicies names the Subscriptions and Topics of the configuration
// in force (the defaults New starts with have none): the policies this
// sidecar may report to the operator. Measurements outlive configurations
// (Latency, PolicyTotals and TopicCounters keep a policy that was removed),
// and the operator refuses a report that names a policy the pod is no
// longer configured with.
func (s *Server) ConfiguredPolicies() (subscriptions, topics []string) {
	p := s.policy.Load()
	return p.SubscriptionNames(), p.TopicNames()
}
