package report_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
)

// operator is a Reports server that does what a test tells it, over plain
// TCP: it admits streams as the operator does (a header), or refuses them
// with a code, and acknowledges each report, keeps quiet, or ends the
// stream on it.
type operator struct {
	xdsv1.UnimplementedReportsServer

	mu      sync.Mutex
	refuse  codes.Code // OK: admit
	verdict func(stream int, r *xdsv1.Report) error
	streams int

	// received has every report as it arrives; refused, every stream
	// refused.
	received chan delivery
	refused  chan codes.Code
}

// delivery is one report as the operator received it.
type delivery struct {
	stream int
	token  string
	report *xdsv1.Report
}

// errQuiet: neither acknowledge the report nor end the stream.
var errQuiet = errors.New("quiet")

// startOperator serves an operator and returns it with a connection to it.
func startOperator(t *testing.T) (*operator, *grpc.ClientConn) {
	t.Helper()
	op := &operator{received: make(chan delivery, 1000), refused: make(chan codes.Code, 1000)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	xdsv1.RegisterReportsServer(srv, op)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return op, conn
}

// setRefuse makes the operator refuse new streams with code (OK: admit).
func (o *operator) setRefuse(code codes.Code) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.refuse = code
}

// setVerdict decides each report's fate: nil acknowledges it, errQuiet
// does nothing, another error ends the stream with it.
func (o *operator) setVerdict(v func(stream int, r *xdsv1.Report) error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.verdict = v
}

func (o *operator) Stream(st xdsv1.Reports_StreamServer) error {
	md, _ := metadata.FromIncomingContext(st.Context())
	token := strings.TrimPrefix(strings.Join(md.Get("authorization"), ","), "Bearer ")
	o.mu.Lock()
	refuse := o.refuse
	o.streams++
	stream := o.streams
	o.mu.Unlock()
	if refuse != codes.OK {
		o.refused <- refuse
		return status.Error(refuse, "refused by the test")
	}
	if err := st.SendHeader(metadata.Pairs("weighstation-accepted-pod", "ns/pod")); err != nil {
		return err
	}
	for {
		r, err := st.Recv()
		if err != nil {
			return nil
		}
		o.received <- delivery{stream: stream, token: token, report: r}
		o.mu.Lock()
		verdict := o.verdict
		o.mu.Unlock()
		var v error
		if verdict != nil {
			v = verdict(stream, r)
		}
		switch {
		case v == errQuiet:
		case v != nil:
			return v
		default:
			if err := st.Send(&xdsv1.ReportAck{Sequence: r.GetSequence()}); err != nil {
				return err
			}
		}
	}
}

// next is the next report the operator receives, within 10 s.
func (o *operator) next(t *testing.T) delivery {
	t.Helper()
	select {
	case d := <-o.received:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("the operator received no report within 10s")
		panic("unreachable")
	}
}

// nextSequences takes the next n reports and returns their streams and
// sequence numbers.
func (o *operator) nextSequences(t *testing.T, n int) (streams []int, sequences []uint64) {
	t.Helper()
	for range n {
		d := o.next(t)
		streams = append(streams, d.stream)
		sequences = append(sequences, d.report.GetSequence())
	}
	return streams, sequences
}

// waitRefused waits for the operator to refuse a stream, within 10 s.
func (o *operator) waitRefused(t *testing.T) {
	t.Helper()
	select {
	case <-o.refused:
	case <-time.After(10 * time.Second):
		t.Fatal("no stream was refused within 10s")
	}
}

// tokenFile writes a token file and returns its path.
func tokenFile(t *testing.T, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	writeToken(t, path, token)
	return path
}

// writeToken replaces the token, as the kubelet does: a new file renamed
// over the old one.
func writeToken(t *testing.T, path, token string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
