package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// chartValues is the Helm chart's values, whose operator.goMemLimit the
// bench gives the operator by default: it measures the operator as the
// chart deploys it.
const chartValues = "charts/weighstation/values.yaml"

func chartGoMemLimit() (string, error) {
	raw, err := os.ReadFile(chartValues)
	if err != nil {
		return "", fmt.Errorf("reading the chart's values (run from the repository root): %w", err)
	}
	var values struct {
		Operator struct {
			GoMemLimit string `json:"goMemLimit"`
		} `json:"operator"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		return "", fmt.Errorf("parsing %s: %w", chartValues, err)
	}
	return values.Operator.GoMemLimit, nil
}
