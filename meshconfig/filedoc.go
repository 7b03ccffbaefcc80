package meshconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// FromDocument builds the PodConfig that a sidecar configuration file
// describes, from the file's generic form: what encoding/json decodes into
// an `any` with UseNumber (map[string]any, []any, json.Number, string,
// bool, nil), from JSON or from YAML converted to JSON.
//
// A file is written by a person, so it is read as one: every key and type is
// checked against the file's vocabulary and reported with its path in the
// document (topics[0].limits); a key left out, or null, gets the default that
// the same field has in the cluster (the CRDs' defaults, and DefaultPolicy
// for a missing default block: see applyFileDefaults); and the result is
// validated with the same
// paths. Every problem found is reported, not only the first. A file without
// a version gets its content's hash, as the operator versions its own.
func FromDocument(doc any) (PodConfig, error) {
	root, ok := doc.(map[string]any)
	if !ok {
		return PodConfig{}, fmt.Errorf("the configuration must be a mapping with the keys %s; got %s", keysOf(podConfigType), describe(doc))
	}
	dropNulls(root)
	var p problems
	checkValue(&p, "", podConfigType, root)
	if err := p.err(); err != nil {
		return PodConfig{}, err
	}
	applyFileDefaults(root)
	cfg, err := decodeDocument(root)
	if err != nil {
		return PodConfig{}, err
	}
	validateFile(&p, cfg)
	if err := p.err(); err != nil {
		return PodConfig{}, err
	}
	if cfg.Version == "" {
		cfg.Version, _ = Hash(cfg) // the JSON form of these types cannot fail to encode
	}
	return cfg, nil
}

// decodeDocument decodes a checked document into a PodConfig. The check
// already refused unknown keys and wrong types, so an error here is a bug,
// reported rather than hidden.
func decodeDocument(root map[string]any) (PodConfig, error) {
	b, err := json.Marshal(root)
	if err != nil {
		return PodConfig{}, fmt.Errorf("re-encoding the checked document: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var cfg PodConfig
	if err := dec.Decode(&cfg); err != nil {
		return PodConfig{}, fmt.Errorf("decoding the checked document: %w", err)
	}
	cfg.Default.PublishRate = rateOrNilPtr(cfg.Default.PublishRate)
	for i := range cfg.Topics {
		cfg.Topics[i].PublishRate = rateOrNilPtr(cfg.Topics[i].PublishRate)
	}
	if cfg.Topics == nil {
		cfg.Topics = []TopicPolicy{}
	}
	if cfg.Subscriptions == nil {
		cfg.Subscriptions = []SubscriptionPolicy{}
	}
	return cfg, nil
}

// rateOrNilPtr makes "publishRate: {}" (no quota) the same configuration,
// and the same version, as no publishRate.
func rateOrNilPtr(r *Rate) *Rate {
	if r == nil {
		return nil
	}
	return RateOrNil(*r)
}

// dropNulls removes the null values of every mapping in v: in a file, a key
// with no value ("essential:" in YAML) means the same as no key, so it gets
// the default.
func dropNulls(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if x == nil {
				delete(v, k)
				continue
			}
			dropNulls(x)
		}
	case []any:
		for _, x := range v {
			dropNulls(x)
		}
	}
}

// maxProblems bounds what one error lists: enough to fix a file in one go,
// not a wall of text for a file in the wrong format altogether.
const maxProblems = 20

// problems collects what is wrong with a document, each with its path.
type problems struct {
	list []string
	more int
}

func (p *problems) addf(format string, args ...any) {
	if len(p.list) == maxProblems {
		p.more++
		return
	}
	p.list = append(p.list, fmt.Sprintf(format, args...))
}

func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	errs := make([]error, 0, len(p.list)+1)
	for _, s := range p.list {
		errs = append(errs, errors.New(s))
	}
	if p.more > 0 {
		errs = append(errs, fmt.Errorf("and %d more", p.more))
	}
	return errors.Join(errs...)
}
