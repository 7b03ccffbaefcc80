package xds

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// Short names for go-control-plane's generated types.
type (
	corev3Node        = corev3.Node
	discoveryRequest  = discoveryv3.DeltaDiscoveryRequest
	discoveryResponse = discoveryv3.DeltaDiscoveryResponse
	discoveryResource = discoveryv3.Resource
)
