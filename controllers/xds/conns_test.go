package xds_test

import (
	"context"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/weighstation/weighstation/controllers/xds"
)

// A replica that does not serve (a standby, or a former leader restarted
// in its pod while the Service still selected it) refuses a stream and
// closes the connection it came on, so that the sidecar dials the Service
// again instead of retrying on a connection to this replica for ever. On a
// real node, sidecars kept reaching the SIGKILLed leader's restarted
// container, and the new leader's configuration never came.
func TestARefusedStreamsConnectionIsClosed(t *testing.T) {
	r := startServer(t, newPublisher(t), xds.NewTracker(), tokens{}, "", nil)
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a stream to a replica that does not serve ended with %v, want Unavailable", err)
	}
	for state := conn.GetState(); state == connectivity.Ready; state = conn.GetState() {
		if !conn.WaitForStateChange(ctx, state) {
			t.Fatalf("the connection stayed %s for 10s after the replica refused its stream", state)
		}
	}
}
