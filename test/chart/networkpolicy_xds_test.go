package chart_test

import (
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
)

// The operator's NetworkPolicy admits to the xDS port only pods with the
// sidecar label (and extraFrom), and leaves the webhook, metrics and
// probe ports open; it can be turned off.
func TestXDSNetworkPolicyAdmitsOnlySidecars(t *testing.T) {
	tests := []struct {
		name      string
		set       []string
		rendered  bool
		peers     int
		openPorts []int
	}{
		{name: "defaults", rendered: true, peers: 1, openPorts: []int{9444, 8080, 8081}},
		{name: "no webhook", set: []string{"webhook.enabled=false"}, rendered: true, peers: 1, openPorts: []int{8080, 8081}},
		{name: "external NATS", set: []string{"broker.enabled=false", "externalNATS.url=nats://nats.example:4222"}, rendered: true, peers: 1, openPorts: []int{9444, 8080, 8081}},
		{name: "another port, an extra peer", set: []string{"operator.xds.port=7443", "operator.xds.networkPolicy.extraFrom[0].ipBlock.cidr=10.0.0.0/8"}, rendered: true, peers: 2, openPorts: []int{9444, 8080, 8081}},
		{name: "off", set: []string{"operator.xds.networkPolicy.enabled=false"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.set...)
			var np *networkingv1.NetworkPolicy
			for _, o := range find(objs, "NetworkPolicy") {
				if o.GetName() == "weighstation-xds" {
					np = typed[networkingv1.NetworkPolicy](t, o)
				}
			}
			if (np != nil) != tc.rendered {
				t.Fatalf("NetworkPolicy weighstation-xds rendered: %t, want %t", np != nil, tc.rendered)
			}
			if np == nil {
				return
			}
			if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || np.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"] != "operator" {
				t.Fatalf("spec %+v, want Ingress on the operator's pods", np.Spec)
			}
			if len(np.Spec.Ingress) != 2 {
				t.Fatalf("%d ingress rules, want 2 (sidecars to xDS, anyone to the others)", len(np.Spec.Ingress))
			}
			xds, open := np.Spec.Ingress[0], np.Spec.Ingress[1]
			wantPort := 9443
			if tc.name == "another port, an extra peer" {
				wantPort = 7443
			}
			if len(xds.Ports) != 1 || xds.Ports[0].Port.IntValue() != wantPort || len(xds.From) != tc.peers {
				t.Fatalf("xDS rule %+v, want port %d from %d peers", xds, wantPort, tc.peers)
			}
			sidecars := xds.From[0]
			if sidecars.NamespaceSelector == nil || len(sidecars.NamespaceSelector.MatchLabels) != 0 || sidecars.PodSelector == nil ||
				len(sidecars.PodSelector.MatchLabels) != 1 || sidecars.PodSelector.MatchLabels["weighstation.io/inject"] != "enabled" {
				t.Errorf("first peer %+v, want pods labelled weighstation.io/inject=enabled in any namespace", sidecars)
			}
			if tc.peers == 2 && (xds.From[1].IPBlock == nil || xds.From[1].IPBlock.CIDR != "10.0.0.0/8") {
				t.Errorf("extra peer %+v, want the ipBlock of extraFrom", xds.From[1])
			}
			var ports []int
			for _, p := range open.Ports {
				ports = append(ports, p.Port.IntValue())
			}
			if len(open.From) != 0 || !slices.Equal(ports, tc.openPorts) {
				t.Errorf("second rule from %v, ports %v: want anyone, ports %v", open.From, ports, tc.openPorts)
			}
		})
	}
}
