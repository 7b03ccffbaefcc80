package main

import (
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// labelsPlaceholder stands for the chart's labels while the CRD is YAML;
// it is then replaced by the template action that renders them.
const labelsPlaceholder = "__CHARTGEN_LABELS__"

// keepPolicy keeps a CRD when the release is uninstalled: deleting a CRD
// deletes every Topic and Subscription in the cluster.
const keepPolicy = "keep"

// crdTemplate wraps one CRD for the chart: the keep policy, the chart's
// labels, and crds.enabled.
func crdTemplate(source string, data []byte) (string, []byte, error) {
	var crd map[string]any
	if err := yaml.Unmarshal(data, &crd); err != nil {
		return "", nil, err
	}
	if crd["kind"] != "CustomResourceDefinition" {
		return "", nil, fmt.Errorf("kind %v, want CustomResourceDefinition", crd["kind"])
	}
	meta, _ := crd["metadata"].(map[string]any)
	if meta == nil {
		return "", nil, errors.New("no metadata")
	}
	name, _ := meta["name"].(string)
	if name == "" {
		return "", nil, errors.New("no metadata.name")
	}
	annotations, _ := meta["annotations"].(map[string]any)
	if annotations == nil {
		annotations = map[string]any{}
	}
	annotations["helm.sh/resource-policy"] = keepPolicy
	meta["annotations"] = annotations
	meta["labels"] = labelsPlaceholder
	body, err := yaml.Marshal(crd)
	if err != nil {
		return "", nil, err
	}
	text := escape(body)
	placeholder := "  labels: " + labelsPlaceholder + "\n"
	if strings.Count(text, placeholder) != 1 {
		return "", nil, errors.New("could not place the labels")
	}
	text = strings.Replace(text, placeholder, "  labels:\n    {{- include \"weighstation.labels\" . | nindent 4 }}\n", 1)
	var b strings.Builder
	b.WriteString(header(source))
	b.WriteString("# helm.sh/resource-policy: keep, since uninstalling must not delete every\n# Topic and Subscription in the cluster.\n")
	b.WriteString("{{- if .Values.crds.enabled }}\n")
	b.WriteString(text)
	b.WriteString("{{- end }}\n")
	plural, _, _ := strings.Cut(name, ".")
	return plural, []byte(b.String()), nil
}
