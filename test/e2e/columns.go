package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/util/jsonpath"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// The Subscription columns the policy story waits for
// (api/v1alpha1/subscription_types.go, +kubebuilder:printcolumn).
var ReportColumns = []string{"P99", "P99.9", "MAX", "DROPPED", "KILLED", "READY"}

// PrinterColumns returns the additional printer columns of a CRD's
// served storage version (what `kubectl get` shows).
func PrinterColumns(crdJSON []byte) ([]apiextensionsv1.CustomResourceColumnDefinition, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := json.Unmarshal(crdJSON, &crd); err != nil {
		return nil, fmt.Errorf("decoding the CRD: %w", err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Served && v.Storage {
			return v.AdditionalPrinterColumns, nil
		}
	}
	return nil, fmt.Errorf("CRD %s has no served storage version", crd.Name)
}

// EvaluateColumns is what `kubectl get` prints in each column for obj (a
// decoded JSON object): the JSONPath's values, empty when missing.
func EvaluateColumns(cols []apiextensionsv1.CustomResourceColumnDefinition, obj map[string]any) (map[string]string, error) {
	out := make(map[string]string, len(cols))
	for _, c := range cols {
		j := jsonpath.New(c.Name).AllowMissingKeys(true)
		if err := j.Parse("{" + c.JSONPath + "}"); err != nil {
			return nil, fmt.Errorf("column %s's JSONPath %s: %w", c.Name, c.JSONPath, err)
		}
		var b bytes.Buffer
		if err := j.Execute(&b, obj); err != nil {
			return nil, fmt.Errorf("column %s: %w", c.Name, err)
		}
		out[c.Name] = b.String()
	}
	return out, nil
}

// ReportedStatus says whether a Subscription's status columns are filled
// from the sidecars' reports: READY True; P99, P99.9 and MAX set from a
// report (status.aggregate exists); with traffic, latencies measured
// (aggregate.count > 0). DROPPED and KILLED are empty when nothing was
// dropped or killed (both fields are omitempty), so they must agree with
// the aggregate rather than be non-empty. It returns "" when filled, or
// what is missing.
func ReportedStatus(cols map[string]string, sub v1alpha1.Subscription, wantTraffic bool) string {
	for _, c := range ReportColumns {
		if _, ok := cols[c]; !ok {
			return fmt.Sprintf("the CRD has no column %s", c)
		}
	}
	agg := sub.Status.Aggregate
	var missing []string
	if cols["READY"] != "True" {
		missing = append(missing, fmt.Sprintf("READY is %q", cols["READY"]))
	}
	if agg == nil {
		missing = append(missing, "no report yet (status.aggregate unset)")
	} else {
		for _, c := range []string{"P99", "P99.9", "MAX"} {
			if cols[c] == "" {
				missing = append(missing, c+" empty")
			}
		}
		if wantTraffic && agg.Count == 0 {
			missing = append(missing, "no latency measured yet (aggregate.count 0)")
		}
		var dropped int64
		for _, d := range agg.Dropped {
			dropped += d.Count
		}
		if got := cols["DROPPED"]; (got == "" && dropped != 0) || (got != "" && got != strconv.FormatInt(dropped, 10)) {
			missing = append(missing, fmt.Sprintf("DROPPED %q disagrees with aggregate.dropped (%d)", got, dropped))
		}
	}
	if k := cols["KILLED"]; k != "" && k != string(v1alpha1.KillManual) && !strings.HasPrefix(k, string(v1alpha1.KillAuto)+" ") && !strings.HasPrefix(k, string(v1alpha1.KillShed)) {
		missing = append(missing, fmt.Sprintf("KILLED %q is none of Manual, Auto n/m pods", k))
	}
	return strings.Join(missing, "; ")
}
