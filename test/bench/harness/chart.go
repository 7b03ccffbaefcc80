package benchharness

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// ChartValues is the Helm chart's values file, relative to the
// repository root.
const ChartValues = "charts/weighstation/values.yaml"

// ChartGoMemLimit is the chart's operator.goMemLimit: the benches give the
// operator the Go memory limit the chart deploys it with, so that they
// measure it as it runs.
func ChartGoMemLimit() (string, error) {
	raw, err := os.ReadFile(ChartValues)
	if err != nil {
		return "", fmt.Errorf("reading the chart's values (run from the repository root): %w", err)
	}
	var values struct {
		Operator struct {
			GoMemLimit string `json:"goMemLimit"`
		} `json:"operator"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		return "", fmt.Errorf("parsing %s: %w", ChartValues, err)
	}
	return values.Operator.GoMemLimit, nil
}

// GoMemLimitEnv is the operator's environment for a bench's -go-memlimit
// flag: "" none, "chart" the chart's (ChartGoMemLimit), else the value.
func GoMemLimitEnv(flag string) ([]string, error) {
	if flag == "chart" {
		limit, err := ChartGoMemLimit()
		if err != nil {
			return nil, fmt.Errorf("-go-memlimit chart: %w", err)
		}
		flag = limit
	}
	if flag == "" {
		return nil, nil
	}
	return []string{"GOMEMLIMIT=" + flag}, nil
}
