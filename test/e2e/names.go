package e2e

// What the stories assume of the chart, the operator and the sidecar,
// with where each comes from. names_test.go checks every one against its
// source, so that a rename there fails here instead of on a cluster.
const (
	// LeaderLabel marks the leading operator pod
	// (controllers/leaderlabel/leaderlabel.go).
	LeaderLabel = "weighstation.io/xds-leader"
	// LeaseName is the operator's leader election Lease, in the release's
	// namespace (operatorapp.LeaderElectionID).
	LeaseName = "weighstation-operator.weighstation.io"
	// OperatorContainer is the operator Deployment's container
	// (charts/weighstation/templates/operator/deployment.yaml).
	OperatorContainer = "operator"
	// ComponentLabel tells the chart's operator pods from its brokers
	// (charts/weighstation/templates/_helpers.tpl).
	ComponentLabel    = "app.kubernetes.io/component"
	InstanceLabel     = "app.kubernetes.io/instance"
	ComponentOperator = "operator"
	ComponentBroker   = "broker"
	// WebhookConfiguration is the chart's MutatingWebhookConfiguration, a
	// fixed name (_helpers.tpl weighstation.webhookConfigurationName), and
	// WebhookService the Service the apiserver calls it through
	// (weighstation.webhookServiceName, with the fullname "weighstation").
	WebhookConfiguration = "weighstation-sidecar-injector"
	WebhookService       = "weighstation-sidecar-injector"
	// SidecarContainer is the injected native sidecar
	// (controllers/webhook/inject.go ContainerName).
	SidecarContainer = "weighstation-sidecar"
	// SidecarMetricsPort serves the injected sidecar's /metrics on the pod's
	// address (controllers/webhook/inject.go DefaultMetricsPort).
	SidecarMetricsPort = 9091
	// BrokerMetricsPort and OperatorMetricsPort are the chart's defaults
	// (values.yaml broker.metrics.port, operator.metrics.port).
	BrokerMetricsPort   = 9092
	OperatorMetricsPort = 8080
	// SubscriptionCRD is the Subscriptions' CRD (api/v1alpha1).
	SubscriptionCRD = "subscriptions.weighstation.io"
)

// Metrics the stories read (sidecar/metrics.go, broker/metrics.go,
// controllers/brokercreds/metrics.go).
const (
	MetricBrokerConnected   = "weighstation_sidecar_broker_connected"
	MetricBrokerReconnects  = "weighstation_sidecar_broker_reconnects_total"
	MetricBrokerInDoubt     = "weighstation_sidecar_broker_in_doubt_total"
	MetricDropped           = "weighstation_sidecar_dropped_total"
	MetricPending           = "weighstation_sidecar_pending_messages"
	MetricArrived           = "weighstation_sidecar_arrived_total"
	MetricDelivered         = "weighstation_sidecar_delivered_total"
	MetricBrokerConnections = "weighstation_broker_connections"
	MetricCredentialsRevoke = "weighstation_operator_broker_credentials_revoked_total"
)
