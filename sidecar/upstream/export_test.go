package upstream

// HandoffBacklog is handoffBacklog, for the tests of WriteSoon's bound.
const HandoffBacklog = handoffBacklog
