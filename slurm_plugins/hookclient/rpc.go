package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/slurm-k8s-bridge/skb-hook/internal/bridgepb"
)

// errorMetadataKey is the trailing metadata key the bridge sets on whole-call errors it raised
// on purpose (bridge.rpc.wire.ERROR_METADATA_KEY): its UNAVAILABLE means a backend, not the bridge.
const errorMetadataKey = "skb-error"

// Quick retries of UNAVAILABLE inside the one deadline (bridge/rpc/client.py has the same): at
// most 3 attempts, 50 ms then 100 ms apart, none once the pause would outlast the deadline.
var backoff = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}

const attempts = 3

// Failure kinds (the log line's result= and a resume's DOWN reason carry them); the names are the
// contract's, shared with bridge/rpc/client.py's and bridge/errors.py's exceptions.
const (
	kindUnreachable = "BridgeUnreachable" // the bridge could not be reached at all
	kindNoAnswer    = "BridgeNoAnswer"    // sent, no answer: the bridge may have acted on it
	// No bridge leads (leader election, mid-failover): the next leader's reconciler creates the
	// pods of nodes left POWERING_UP, so a resume must not fail them.
	kindNotLeader = "NotLeader"
)

// callError is a whole-call failure: its class (BridgeUnreachable, InvalidInput, ...) and message.
type callError struct{ class, message string }

func (e *callError) Error() string { return e.class + ": " + e.message }

// describeFailure gives the reason kind and the detail logged: BridgeUnreachable,
// BridgeNoAnswer and NotLeader as themselves, any other failure as BridgeFailed with
// `<class>: <message>`.
func describeFailure(err error) (string, string) {
	var ce *callError
	if errors.As(err, &ce) {
		switch ce.class {
		case kindNoAnswer, kindUnreachable, kindNotLeader:
			return ce.class, ce.message
		}
		return "BridgeFailed", ce.class + ": " + ce.message
	}
	return "BridgeFailed", err.Error()
}

// statusNames are gRPC's canonical status code names (grpc/doc/statuscodes.md), which the
// contract writes; Go's codes.Code.String() spells them in CamelCase.
var statusNames = map[codes.Code]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
	codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
	codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
	codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS",
	codes.Unauthenticated: "UNAUTHENTICATED",
}

// rpcFailure is what one attempt saw: the status, whether the bridge itself marked it, and the
// last dial error (grpc-go's status text is not the contract's words; classify writes those).
type rpcFailure struct {
	code       codes.Code
	message    string
	fromBridge bool
	// bridgeError: the bridge's error class, as its marker says (NotLeader, ...); "" unmarked.
	bridgeError string
	// served: the bridge sent HTTP/2 bytes on some connection of the attempt. A connection counts
	// as made only once the server's SETTINGS arrive; before that, the bridge is unreachable (a
	// refused socket, or a TLS 1.3 client certificate the bridge rejects after the handshake).
	served   bool
	dialErr  error
	dialAddr string
}

// classify names a failed attempt's failure kind and message: `<target>: <cause> (<n> attempts)`
// for an unreachable bridge or one that did not answer, where cause is the OS's words for a failed
// connect (strerror) or "Deadline Exceeded" (bridge.rpc.client._error_from_rpc has the same).
func classify(f rpcFailure, target string, attempt int) *callError {
	details := f.message
	if details == "" {
		details = statusNames[f.code]
	}
	switch {
	case f.code == codes.InvalidArgument:
		return &callError{"InvalidInput", details}
	case f.code == codes.PermissionDenied:
		return &callError{"CallerNotAllowed", details}
	case f.code == codes.Unavailable && f.fromBridge && f.bridgeError == kindNotLeader:
		return &callError{kindNotLeader, details}
	case f.code == codes.Unavailable && f.fromBridge:
		return &callError{"TransientBackendError", details}
	case f.code == codes.Unavailable || f.code == codes.DeadlineExceeded:
		failedToConnect := f.code == codes.Unavailable && !f.served
		// grpc-go wraps transport failures as `connection error: desc = "…"`: keep the last
		// nested error.
		cause := details
		if d, ok := strings.CutPrefix(cause, `connection error: desc = "`); ok {
			cause = strings.TrimSuffix(d, `"`)
		}
		if i := strings.LastIndex(cause, "error: "); i >= 0 {
			cause = cause[i+len("error: "):]
		}
		switch {
		case f.code == codes.DeadlineExceeded:
			cause = "Deadline Exceeded"
		case failedToConnect && f.dialErr != nil:
			cause = dialCause(target, f.dialAddr, f.dialErr)
		}
		msg := fmt.Sprintf("%s: %s (%d attempts)", target, cause, attempt)
		if failedToConnect {
			return &callError{kindUnreachable, msg}
		}
		// Connected, sent, and then the bridge died or hung: it may have acted on the call.
		return &callError{kindNoAnswer, msg}
	}
	name := statusNames[f.code]
	if name == "" {
		name = f.code.String()
	}
	return &callError{"BridgeError", name + ": " + details}
}

// dialCause words a failed connect: the OS's words for a Unix socket (`No such file or
// directory`), and for TCP `UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host:
// Connection refused`, the words grpc's C core (the Python client) uses.
func dialCause(target, addr string, err error) string {
	text := strerror(err)
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			text = "Deadline Exceeded"
		}
	}
	if strings.HasPrefix(target, "unix:") {
		return text
	}
	family := "ipv4:"
	if host, _, e := net.SplitHostPort(addr); e == nil && strings.Contains(host, ":") {
		family = "ipv6:"
	}
	return "UNKNOWN: " + family + addr + ": Failed to connect to remote host: " + text
}

// nodeResult is one node's answer, with names as bridge.domain.results spells them.
type nodeResult struct{ node, outcome, errorClass, message string }

var outcomeNames = map[pb.Outcome]string{
	pb.Outcome_OUTCOME_OK: "OK", pb.Outcome_OUTCOME_REJECTED: "REJECTED",
	pb.Outcome_OUTCOME_FAILED: "FAILED", pb.Outcome_OUTCOME_ACCEPTED: "ACCEPTED",
}

var errorClassNames = map[pb.ErrorClass]string{
	pb.ErrorClass_ERROR_CLASS_NONE: "NONE", pb.ErrorClass_ERROR_CLASS_INVALID: "INVALID",
	pb.ErrorClass_ERROR_CLASS_UNKNOWN_NODE: "UNKNOWN_NODE", pb.ErrorClass_ERROR_CLASS_NO_CAPACITY: "NO_CAPACITY",
	pb.ErrorClass_ERROR_CLASS_TRANSIENT: "TRANSIENT", pb.ErrorClass_ERROR_CLASS_INTERNAL: "INTERNAL",
}

// resultFromPB is bridge.rpc.wire.result_from_pb: an unknown outcome counts as an internal failure.
func resultFromPB(r *pb.NodeResult) nodeResult {
	ec, ok := errorClassNames[r.GetErrorClass()]
	if !ok {
		ec = "INTERNAL"
	}
	oc, ok := outcomeNames[r.GetOutcome()]
	if !ok {
		oc, ec = "FAILED", "INTERNAL"
	}
	return nodeResult{node: r.GetNode(), outcome: oc, errorClass: ec, message: r.GetMessage()}
}

var nodeEventKinds = map[string]pb.NodeEventKind{
	"down": pb.NodeEventKind_NODE_EVENT_KIND_DOWN, "drain": pb.NodeEventKind_NODE_EVENT_KIND_DRAIN,
	"fail": pb.NodeEventKind_NODE_EVENT_KIND_FAIL, "up": pb.NodeEventKind_NODE_EVENT_KIND_UP,
	"idle": pb.NodeEventKind_NODE_EVENT_KIND_IDLE,
}

// send makes the call's RPC, retrying UNAVAILABLE quickly inside one overall deadline
// (bridge.rpc.client.BridgeClient._call); every RPC is idempotent, so a retry is harmless.
func send(call hookCall, s settings, requestID string) ([]nodeResult, error) {
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	if s.tls != nil {
		c, err := tlsCredentials(*s.tls)
		if err != nil {
			return nil, err
		}
		creds = c
	}
	rpc := func(ctx context.Context, client pb.BridgeClient, opts ...grpc.CallOption) ([]*pb.NodeResult, error) {
		switch call.kind {
		case "resume":
			// Not waiting for the pods: at a thousand nodes that outlasts our deadline, and Slurm
			// ignores our exit status; the bridge sets nodes it cannot back DOWN itself.
			r, err := client.ResumeNodes(ctx, &pb.ResumeNodesRequest{Hostlist: call.hostlist,
				ResumeFile: call.resumeFile, RequestId: requestID, Wait: false}, opts...)
			return r.GetResults(), err
		case "suspend":
			r, err := client.SuspendNodes(ctx, &pb.SuspendNodesRequest{Hostlist: call.hostlist, RequestId: requestID}, opts...)
			return r.GetResults(), err
		case "resume_fail":
			r, err := client.ResumeFailed(ctx, &pb.ResumeFailedRequest{Hostlist: call.hostlist, RequestId: requestID}, opts...)
			return r.GetResults(), err
		default:
			r, err := client.NodeEvent(ctx, &pb.NodeEventRequest{Kind: nodeEventKinds[call.event],
				Hostlist: call.hostlist, RequestId: requestID}, opts...)
			return r.GetResults(), err
		}
	}
	deadline := time.Now().Add(time.Duration(s.timeoutS * float64(time.Second)))
	delivered := false // whether any attempt may have reached the bridge
	for attempt := 1; ; attempt++ {
		remaining := time.Until(deadline)
		if remaining < time.Millisecond {
			remaining = time.Millisecond
		}
		results, failure := attempt1(s.target, creds, remaining, rpc)
		if failure == nil {
			out := make([]nodeResult, len(results))
			for i, r := range results {
				out[i] = resultFromPB(r)
			}
			return out, nil
		}
		ce := classify(*failure, s.target, attempt)
		delivered = delivered || ce.class != kindUnreachable
		pause := backoff[min(attempt, len(backoff))-1]
		retry := failure.code == codes.Unavailable && attempt < attempts && time.Until(deadline) > pause
		if !retry {
			// A bridge that died mid-call refuses the retries: still "no answer".
			if delivered && ce.class == kindUnreachable {
				ce.class = kindNoAnswer
			}
			return nil, ce
		}
		time.Sleep(pause)
	}
}

// attempt1 makes one attempt on a fresh connection (a channel that failed to connect would
// otherwise wait out its reconnect backoff and fail the quick retries without dialling).
func attempt1(
	target string, creds credentials.TransportCredentials, timeout time.Duration,
	rpc func(context.Context, pb.BridgeClient, ...grpc.CallOption) ([]*pb.NodeResult, error),
) ([]*pb.NodeResult, *rpcFailure) {
	var mu sync.Mutex
	var dialErr error
	var dialAddr string
	network := "tcp"
	if strings.HasPrefix(target, "unix:") {
		network = "unix"
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		if network == "unix" { // grpc-go hands a custom dialer the whole target here
			addr = unixPath(target)
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		mu.Lock()
		dialErr, dialAddr = err, addr
		mu.Unlock()
		return conn, err
	}
	served := &atomic.Bool{}
	creds = servedCreds{creds, served}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds), grpc.WithContextDialer(dial))
	if err != nil {
		return nil, &rpcFailure{code: codes.Unavailable, message: err.Error()}
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var trailer metadata.MD
	results, err := rpc(ctx, pb.NewBridgeClient(conn), grpc.Trailer(&trailer))
	if err == nil {
		return results, nil
	}
	st := status.Convert(err)
	marker, fromBridge := trailer[errorMetadataKey]
	bridgeError := ""
	if len(marker) > 0 {
		bridgeError = marker[0]
	}
	mu.Lock()
	defer mu.Unlock()
	return nil, &rpcFailure{code: st.Code(), message: st.Message(), fromBridge: fromBridge,
		bridgeError: bridgeError, served: served.Load(), dialErr: dialErr, dialAddr: dialAddr}
}

// servedCreds notes in served when the bridge sends anything after the (TLS) handshake.
type servedCreds struct {
	credentials.TransportCredentials
	served *atomic.Bool
}

func (c servedCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return conn, info, err
	}
	return servedConn{conn, c.served}, info, nil
}

func (c servedCreds) Clone() credentials.TransportCredentials {
	return servedCreds{c.TransportCredentials.Clone(), c.served}
}

type servedConn struct {
	net.Conn
	served *atomic.Bool
}

func (c servedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.served.Store(true)
	}
	return n, err
}

// unixPath is the socket path of `unix:/path`, `unix:///path` or `unix:relative`.
func unixPath(target string) string {
	p := strings.TrimPrefix(target, "unix:")
	if strings.HasPrefix(p, "//") {
		p = p[2:]
	}
	return p
}

// tlsCredentials reads the PEM files for mutual TLS; the server name is the target's host, as
// the Python client (grpc's default) checks it.
func tlsCredentials(files tlsFiles) (credentials.TransportCredentials, error) {
	var pems [3][]byte
	for i, path := range []string{files.cert, files.key, files.ca} {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, &callError{"ConfigError", "cannot read TLS file " + path + ": " + strerror(err)}
		}
		pems[i] = b
	}
	pair, err := tls.X509KeyPair(pems[0], pems[1])
	if err != nil {
		return nil, &callError{"ConfigError", "bad TLS certificate or key: " + err.Error()}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pems[2]) {
		return nil, &callError{"ConfigError", "no CA certificate in " + files.ca}
	}
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}), nil
}
