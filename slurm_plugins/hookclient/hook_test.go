package main

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	pb "github.com/slurm-k8s-bridge/skb-hook/internal/bridgepb"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseArgv(t *testing.T) {
	cases := []struct {
		argv []string
		want hookCall
		err  string
	}{
		{[]string{"resume", "c[1-2]"}, hookCall{kind: "resume", hostlist: "c[1-2]"}, ""},
		{[]string{"suspend", "c1"}, hookCall{kind: "suspend", hostlist: "c1"}, ""},
		{[]string{"resume_fail", "c1"}, hookCall{kind: "resume_fail", hostlist: "c1"}, ""},
		{[]string{"node_event", "drain", "c1"}, hookCall{kind: "node_event", event: "drain", hostlist: "c1"}, ""},
		{nil, hookCall{}, "first argument must be one of resume, suspend, resume_fail, node_event"},
		{[]string{"bogus", "c1"}, hookCall{}, "first argument must be one of resume, suspend, resume_fail, node_event"},
		{[]string{"resume"}, hookCall{}, "usage: resume <hostlist> (exactly one hostlist, as Slurm passes it)"},
		{[]string{"resume", ""}, hookCall{}, "usage: resume <hostlist> (exactly one hostlist, as Slurm passes it)"},
		{[]string{"suspend", "a", "b"}, hookCall{}, "usage: suspend <hostlist> (exactly one hostlist, as Slurm passes it)"},
		{[]string{"node_event", "reboot", "c1"}, hookCall{}, "usage: node_event <down|drain|fail|up|idle> <hostlist>"},
		{[]string{"node_event", "down"}, hookCall{}, "usage: node_event <down|drain|fail|up|idle> <hostlist>"},
		{[]string{"node_event", "down", ""}, hookCall{}, "usage: node_event <down|drain|fail|up|idle> <hostlist>"},
	}
	for _, c := range cases {
		got, err := parseArgv(c.argv)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("parseArgv(%q) error = %v, want %q", c.argv, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseArgv(%q) = %+v, %v; want %+v", c.argv, got, err, c.want)
		}
	}
	if n := (hookCall{kind: "node_event", event: "up"}).name(); n != "node_event:up" {
		t.Errorf("name = %q", n)
	}
}

func TestSettingsFromEnv(t *testing.T) {
	def := settings{target: defaultTarget, slurmBin: defaultSlurmBin, logPath: defaultHookLog, timeoutS: 2}
	with := func(f func(*settings)) settings { s := def; f(&s); return s }
	cases := []struct {
		env  map[string]string
		want settings
	}{
		{map[string]string{}, def},
		{map[string]string{"SKB_SOCKET": "", "SKB_SLURM_BIN": "", "SKB_TIMEOUT_S": ""}, def},
		{map[string]string{"SKB_SOCKET": "host:50051"}, with(func(s *settings) { s.target = "host:50051" })},
		{map[string]string{"SKB_SLURM_BIN": "/opt/slurm/bin"}, with(func(s *settings) { s.slurmBin = "/opt/slurm/bin" })},
		{map[string]string{"SKB_HOOK_LOG": ""}, with(func(s *settings) { s.logPath = "" })},
		{map[string]string{"SKB_HOOK_LOG": "/tmp/h.log"}, with(func(s *settings) { s.logPath = "/tmp/h.log" })},
		{map[string]string{"SKB_TIMEOUT_S": "0.5"}, with(func(s *settings) { s.timeoutS = 0.5 })},
		{map[string]string{"SKB_TIMEOUT_S": " 3\t"}, with(func(s *settings) { s.timeoutS = 3 })},
		{map[string]string{"SKB_TIMEOUT_S": ".5"}, with(func(s *settings) { s.timeoutS = 0.5 })},
		{map[string]string{"SKB_TIMEOUT_S": "3600"}, with(func(s *settings) { s.timeoutS = 3600 })},
		{map[string]string{"SKB_TIMEOUT_S": "3601"}, def},
		{map[string]string{"SKB_TIMEOUT_S": "0"}, def},
		{map[string]string{"SKB_TIMEOUT_S": "-1"}, def},
		{map[string]string{"SKB_TIMEOUT_S": "."}, def},
		{map[string]string{"SKB_TIMEOUT_S": "1.2.3"}, def},
		{map[string]string{"SKB_TIMEOUT_S": "1_0"}, def},
		{map[string]string{"SKB_TIMEOUT_S": "1e1"}, def},
		{map[string]string{"SKB_TIMEOUT_S": "inf"}, def},
		{map[string]string{"SKB_TIMEOUT_S": "two"}, def},
		{map[string]string{"SKB_TIMEOUT_S": "2s"}, def},
		{map[string]string{"SKB_TIMEOUT_S": "0x10"}, def},
		{map[string]string{"SKB_TLS_CERT": "c", "SKB_TLS_KEY": "k"}, def},
		{map[string]string{"SKB_TLS_CERT": "c", "SKB_TLS_KEY": "k", "SKB_TLS_CA": "a"},
			with(func(s *settings) { s.tls = &tlsFiles{"c", "k", "a"} })},
	}
	for _, c := range cases {
		if got := settingsFromEnv(envOf(c.env)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("settingsFromEnv(%v) = %+v, want %+v", c.env, got, c.want)
		}
	}
}

func TestReadResumeFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	big := write("big", strings.Repeat("x", resumeFileMax+1))
	cases := []struct {
		env       map[string]string
		raw, note string
		read      bool
	}{
		{map[string]string{}, "", "no SLURM_RESUME_FILE", false},
		{map[string]string{"SLURM_RESUME_FILE": write("ok", `{"jobs":[]}`)}, `{"jobs":[]}`, "", true},
		{map[string]string{"SLURM_RESUME_FILE": write("empty", "")}, "", "", true},
		{map[string]string{"SLURM_RESUME_FILE": write("crlf", "a\r\nb\rc\xff\xe2\x82")}, "a\r\nb\rc\xff\xe2\x82", "", true},
		{map[string]string{"SLURM_RESUME_FILE": filepath.Join(dir, "absent")}, "", "cannot read SLURM_RESUME_FILE: No such file or directory", false},
		{map[string]string{"SLURM_RESUME_FILE": dir}, "", "cannot read SLURM_RESUME_FILE: Is a directory", false},
		{map[string]string{"SLURM_RESUME_FILE": big}, "", "SLURM_RESUME_FILE over 16777216 bytes: not sent", false},
		{map[string]string{"SLURM_RESUME_FILE": write("max", strings.Repeat("é", resumeFileMax/2))}, strings.Repeat("é", resumeFileMax/2), "", true},
		{map[string]string{"SLURM_RESUME_FILE": write("over", strings.Repeat("é", resumeFileMax/2)+"x")}, "", "SLURM_RESUME_FILE over 16777216 bytes: not sent", false},
	}
	for _, c := range cases {
		raw, note := readResumeFile(envOf(c.env))
		if string(raw) != c.raw || note != c.note || (raw != nil) != c.read {
			t.Errorf("readResumeFile(%v) = %.40q (read %v), %q; want %.40q (read %v), %q",
				c.env, raw, raw != nil, note, c.raw, c.read, c.note)
		}
	}
	// The bridge gets each byte outside valid UTF-8 as U+FFFD; no newline translation.
	if got := validUTF8([]byte("a\r\nb\rc\xff\xe2\x82")); got != "a\r\nb\rc\ufffd\ufffd\ufffd" {
		t.Errorf("validUTF8 = %q", got)
	}
}

func TestHandOffPieces(t *testing.T) {
	def := settings{siteResume: "/r", siteSuspend: "/s", siteResumeFail: "/f"}
	for kind, want := range map[string]string{"resume": "/r", "suspend": "/s", "resume_fail": "/f", "node_event": ""} {
		if got := def.siteProgram(kind); got != want {
			t.Errorf("siteProgram(%s) = %q, want %q", kind, got, want)
		}
	}
	results := []nodeResult{
		{node: "n2", outcome: "REJECTED", errorClass: "UNKNOWN_NODE"},
		{node: "c1", outcome: "OK", errorClass: "NONE"},
		{node: "c2", outcome: "FAILED", errorClass: "NO_CAPACITY"},
		{node: "n1", outcome: "REJECTED", errorClass: "UNKNOWN_NODE"},
	}
	if got := siteNodes(results); !reflect.DeepEqual(got, []string{"n2", "n1"}) {
		t.Errorf("siteNodes = %q", got)
	}
	if got := siteNodes(results[1:3]); got != nil {
		t.Errorf("siteNodes, none unknown = %q", got)
	}
	environ := []string{"PWD=/", "SKB_SOCKET=unix:/s", "SLURM_RESUME_FILE=/proc/1/fd/9", "SKB_SITE_RESUME_PROGRAM=/r", "SKBX=1"}
	if got := siteEnv(environ, ""); !reflect.DeepEqual(got, []string{"PWD=/", "SLURM_RESUME_FILE=/proc/1/fd/9", "SKBX=1"}) {
		t.Errorf("siteEnv, no resume file = %q", got)
	}
	if got := siteEnv(environ, "/proc/2/fd/3"); !reflect.DeepEqual(got, []string{"PWD=/", "SKBX=1", "SLURM_RESUME_FILE=/proc/2/fd/3"}) {
		t.Errorf("siteEnv, resume file = %q", got)
	}
	if got := handOff("bin/site-resume", "n1", environ, nil); got != "not an absolute path" {
		t.Errorf("handOff relative = %q", got)
	}
	if got := handOff(filepath.Join(t.TempDir(), "absent"), "n1", environ, nil); got != "No such file or directory" {
		t.Errorf("handOff absent = %q", got)
	}
}

func TestMemfdHolding(t *testing.T) {
	data := []byte("{\"jobs\":[]}\n\xff")
	fd := memfdHolding(data)
	if fd < 0 {
		t.Fatal("memfdHolding failed")
	}
	defer syscall.Close(fd)
	got, err := os.ReadFile("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil || string(got) != string(data) {
		t.Errorf("memfd holds %q, %v; want %q", got, err, data)
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC != 0 {
		t.Errorf("memfd flags %#x, %v: close-on-exec must be off", flags, err)
	}
}

func TestLogValue(t *testing.T) {
	// bridge/hooks.py's log_value gives the same for these (tests/unit/test_hooks.py).
	cases := map[string]string{
		"":                               `""`,
		"c[1-3],gpu-[01-02]":             "c[1-3],gpu-[01-02]",
		"scontrol-state=down":            "scontrol-state=down",
		"no SLURM_RESUME_FILE":           `"no SLURM_RESUME_FILE"`,
		"it's":                           `"it's"`,
		`say "hi" \ bye`:                 `"say \"hi\" \\ bye"`,
		"tab\tnl\ncr\r\b\f":              `"tab\tnl\ncr\r\b\f"`,
		"\x00\x1f\x7f\u0085\u009f\u00a0": `"\u0000\u001f\u007f\u0085\u009f` + "\u00a0" + `"`,
		"é 日本 \u2028\u2029 \U0001F600":   `"é 日本 \u2028\u2029 ` + "\U0001F600" + `"`,
		"bad\xffbyte\xe2\x82":            `"bad\udcffbyte\udce2\udc82"`,
		"\ufffd":                         `"` + "\ufffd" + `"`,
	}
	for in, want := range cases {
		if got := logValue(in); got != want {
			t.Errorf("logValue(%q) = %s, want %s", in, got, want)
		}
	}
	if got := logList([]string{"resume", "a b", `x"y`}); got != `["resume","a b","x\"y"]` {
		t.Errorf("logList = %s", got)
	}
	if got := logList(nil); got != "[]" {
		t.Errorf("logList(nil) = %s", got)
	}
}

func TestLogLineAndErrors(t *testing.T) {
	at := time.Date(2026, 12, 3, 17, 4, 5, 0, time.FixedZone("", 3600+1800))
	if got := logLine(at, 42, "resume x"); got != "2026-12-03T17:04:05+0130 slurm-k8s-bridge-hook[42] resume x\n" {
		t.Errorf("logLine = %q", got)
	}
	if got := strerror(syscall.ENOENT); got != "No such file or directory" {
		t.Errorf("strerror = %q", got)
	}
	if got := strerror(&os.PathError{Op: "open", Path: "/x", Err: syscall.EACCES}); got != "Permission denied" {
		t.Errorf("strerror = %q", got)
	}
}

func TestClassify(t *testing.T) {
	const target = "unix:/run/b.sock"
	dialing := `connection error: desc = "transport: Error while dialing: dial unix /run/b.sock: connect: connection refused"`
	cases := []struct {
		name    string
		f       rpcFailure
		class   string
		message string
	}{
		{"refused", rpcFailure{code: codes.Unavailable, message: dialing, dialErr: syscall.ECONNREFUSED},
			"BridgeUnreachable", "unix:/run/b.sock: Connection refused (3 attempts)"},
		{"no socket", rpcFailure{code: codes.Unavailable, message: dialing, dialErr: syscall.ENOENT},
			"BridgeUnreachable", "unix:/run/b.sock: No such file or directory (3 attempts)"},
		{"tls refused", rpcFailure{code: codes.Unavailable, message: "connection error: desc = \"error reading server preface: remote error: tls: unknown certificate authority\""},
			"BridgeUnreachable", "unix:/run/b.sock: tls: unknown certificate authority (3 attempts)"},
		{"deadline", rpcFailure{code: codes.DeadlineExceeded, message: "context deadline exceeded"},
			"BridgeNoAnswer", "unix:/run/b.sock: Deadline Exceeded (3 attempts)"},
		{"died mid-call", rpcFailure{code: codes.Unavailable, message: "error reading from server: EOF", served: true},
			"BridgeNoAnswer", "unix:/run/b.sock: error reading from server: EOF (3 attempts)"},
		{"backend down", rpcFailure{code: codes.Unavailable, message: "kubernetes: 503", fromBridge: true},
			"TransientBackendError", "kubernetes: 503"},
		{"bad input", rpcFailure{code: codes.InvalidArgument, message: "bad hostlist"}, "InvalidInput", "bad hostlist"},
		{"not allowed", rpcFailure{code: codes.PermissionDenied, message: "uid 7"}, "CallerNotAllowed", "uid 7"},
		{"other", rpcFailure{code: codes.FailedPrecondition, message: "no pools"}, "BridgeError", "FAILED_PRECONDITION: no pools"},
		{"empty details", rpcFailure{code: codes.Internal}, "BridgeError", "INTERNAL: INTERNAL"},
	}
	for _, c := range cases {
		got := classify(c.f, target, 3)
		if got.class != c.class || got.message != c.message {
			t.Errorf("%s: classify = %s / %q, want %s / %q", c.name, got.class, got.message, c.class, c.message)
		}
	}
	tcp := dialCause("127.0.0.1:1", "127.0.0.1:1", syscall.ECONNREFUSED)
	if tcp != "UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host: Connection refused" {
		t.Errorf("dialCause tcp = %q", tcp)
	}
}

func TestDescribeFailure(t *testing.T) {
	cases := []struct {
		err          error
		kind, detail string
	}{
		{&callError{"BridgeUnreachable", "t: refused (3 attempts)"}, "BridgeUnreachable", "t: refused (3 attempts)"},
		{&callError{"BridgeNoAnswer", "t: Deadline Exceeded (1 attempts)"}, "BridgeNoAnswer", "t: Deadline Exceeded (1 attempts)"},
		{&callError{"CallerNotAllowed", "uid 7"}, "BridgeFailed", "CallerNotAllowed: uid 7"},
		{&callError{"InvalidInput", "bad"}, "BridgeFailed", "InvalidInput: bad"},
		{&callError{"TransientBackendError", "503"}, "BridgeFailed", "TransientBackendError: 503"},
		{&callError{"ConfigError", "cannot read TLS file: x"}, "BridgeFailed", "ConfigError: cannot read TLS file: x"},
		{errors.New("boom"), "BridgeFailed", "boom"},
	}
	for _, c := range cases {
		kind, detail := describeFailure(c.err)
		if kind != c.kind || detail != c.detail {
			t.Errorf("describeFailure(%v) = %s, %q; want %s, %q", c.err, kind, detail, c.kind, c.detail)
		}
	}
}

func TestOurReasonAndSummary(t *testing.T) {
	if got := ourReason("BridgeUnreachable", "a\nb "); got != "k8s: BridgeUnreachable: a b" {
		t.Errorf("ourReason = %q", got)
	}
	long := ourReason("X", strings.Repeat("é", 300))
	if n := len([]rune(long)); n != 200 || !strings.HasSuffix(long, "...") {
		t.Errorf("ourReason long: %d characters", n)
	}
	// 200 characters exactly stay whole; an undecodable byte counts as one and is kept.
	exact := ourReason("X", strings.Repeat("\xff", 200-len("k8s: X: ")))
	if exact != "k8s: X: "+strings.Repeat("\xff", 192) {
		t.Errorf("ourReason exact: %q", exact)
	}
	if cut := ourReason("X", strings.Repeat("\xff", 200)); cut != "k8s: X: "+strings.Repeat("\xff", 189)+"..." {
		t.Errorf("ourReason cut: %q", cut)
	}
	results := []nodeResult{
		resultFromPB(&pb.NodeResult{Node: "c1", Outcome: pb.Outcome_OUTCOME_OK}),
		resultFromPB(&pb.NodeResult{Node: "c2", Outcome: pb.Outcome_OUTCOME_ACCEPTED}),
		resultFromPB(&pb.NodeResult{Node: "c3", Outcome: pb.Outcome_OUTCOME_REJECTED, ErrorClass: pb.ErrorClass_ERROR_CLASS_UNKNOWN_NODE, Message: "no pool"}),
		resultFromPB(&pb.NodeResult{Node: "c4", Outcome: pb.Outcome(9), ErrorClass: pb.ErrorClass_ERROR_CLASS_NONE}),
	}
	want := `nodes=4 ok=1 accepted=1 not_ok=2 first_not_ok="c3:UNKNOWN_NODE:no pool, c4:INTERNAL:"`
	if got := summarize(results); got != want {
		t.Errorf("summarize = %q\nwant        %q", got, want)
	}
}
