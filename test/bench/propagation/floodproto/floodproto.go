// Package floodproto is what the flood generator (test/bench/propagation/flood)
// reports to the benchmark that runs it: one JSON document, written at its
// end.
package floodproto

// Stats is what the flood did, written to -stats at its end.
type Stats struct {
	// Rate is the attempts per second asked for; Launched how many
	// started; Skipped how many were due while MaxInFlight attempts were
	// still waiting for their answer (the operator answering slower than
	// the flood arrives), not sent.
	Rate     float64 `json:"rate"`
	Launched int64   `json:"launched"`
	Skipped  int64   `json:"skipped"`
	// Outcomes counts the attempts by answer: "admitted", or the gRPC
	// code of the refusal; Valid and Forged split the admitted and the
	// refused by token.
	Outcomes map[string]int64 `json:"outcomes"`
	Valid    map[string]int64 `json:"valid"`
	Forged   map[string]int64 `json:"forged"`
	// Seconds is the flood's wall time; AnswerMsMax the slowest answer.
	Seconds     float64 `json:"seconds"`
	AnswerMsAvg float64 `json:"answerMsAvg"`
	AnswerMsMax float64 `json:"answerMsMax"`
	// LastRefusal is one refusal's message of each code, for the report.
	LastRefusal map[string]string `json:"lastRefusal"`
}
