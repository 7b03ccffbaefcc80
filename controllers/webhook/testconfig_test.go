package webhook

import "github.com/weighstation/weighstation/controllers/injectionproof"

// testConfig is a Config as the operator's flag defaults make it.
func testConfig() Config {
	return Config{
		Image:                  "ghcr.io/weighstation/weighstation:v1.2.3",
		Operator:               "weighstation-xds.weighstation-system.svc:9443",
		Broker:                 "nats://weighstation-broker.weighstation-system.svc:4222",
		Audience:               "weighstation.io/xds",
		TokenExpirationSeconds: 3600,
		Version:                "v1.2.3",
		HealthPort:             DefaultHealthPort,
		MetricsPort:            DefaultMetricsPort,
		Resources:              DefaultResources(),
		PrometheusAnnotations:  true,
		RunAsUser:              DefaultRunAsUser,
	}
}

// testKey is the injection proof key of the tests' injectors.
var testKey = injectionproof.StaticKey("0123456789abcdef0123456789abcdef")
