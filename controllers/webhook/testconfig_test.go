package webhook

import (
	"k8s.io/apimachinery/pkg/api/resource"
)

// testConfig is a Config as the operator's flag defaults make it.
func testConfig() Config {
	q := resource.MustParse
	return Config{
		Image:                  "ghcr.io/weighstation/weighstation:v1.2.3",
		Operator:               "weighstation-xds.weighstation-system.svc:9443",
		Broker:                 "nats://weighstation-broker.weighstation-system.svc:4222",
		Audience:               "weighstation.io/xds",
		TokenExpirationSeconds: 3600,
		Version:                "v1.2.3",
		HealthPort:             DefaultHealthPort,
		MetricsPort:            DefaultMetricsPort,
		Resources: Resources{
			CPURequest: q("50m"), CPULimit: q("500m"),
			MemoryRequest: q("96Mi"), MemoryLimit: q("128Mi"),
			CPUMin: q("10m"), CPUMax: q("2"),
			MemoryMin: q("32Mi"), MemoryMax: q("1Gi"),
			MemoryBudget: 64 << 20, MemoryMargin: DefaultMemoryMargin,
		},
	}
}
