// Command skb-hook is what slurmctld runs as ResumeProgram, SuspendProgram, ResumeFailProgram and
// strigger program: the primary hook client, a static binary that starts in milliseconds.
//
//	skb-hook resume|suspend|resume_fail <hostlist>
//	skb-hook node_event down|drain|fail|up|idle <hostlist>
//
// It and the fallback, `python -m bridge.hooks` (used where this binary is not built, and by the
// pip install's entry points), implement one contract: argv, SKB_* settings (hook.sh reads them
// from hooks.env), the resume file, the RPCs and their fields, quick retries inside one deadline,
// the log line, what a failed resume writes to Slurm (scontrol ... state=down), the hand-off of
// nodes no pool owns to the site's own programs (handoff.go), and the exit status (0 the bridge
// took the call, 1 it did not, 2 bad arguments; after a hand-off, the site program's). The contract is one table
// in tests/unit/test_hook_client.py, which runs both clients through every row;
// slurm_plugins/README.md says it in words.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Defaults, as bridge/hooks.py and bridge/settings.py have them.
const (
	defaultTarget   = "unix:/run/slurm-k8s-bridge/bridge.sock" // bridge.settings.DEFAULT_TARGET
	defaultSlurmBin = "/usr/bin"
	defaultHookLog  = "/var/log/slurm/slurm-k8s-bridge-hooks.log"
	defaultTimeoutS = 2.0
	// maxTimeoutS: a larger SKB_TIMEOUT_S is a typo, and the default applies.
	maxTimeoutS = 3600.0
	// resumeFileMax is the biggest resume file sent on, in bytes (hooks.RESUME_FILE_MAX; the
	// bridge takes as many characters): a bigger one would fail the whole batch, the hostlist
	// alone suffices.
	resumeFileMax = 16 * 1024 * 1024
)

const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

var (
	hookKinds  = []string{"resume", "suspend", "resume_fail", "node_event"}
	eventKinds = []string{"down", "drain", "fail", "up", "idle"}
)

// settings says where the bridge is and where the hook writes (hooks.HookSettings).
type settings struct {
	target   string
	slurmBin string
	logPath  string
	timeoutS float64
	tls      *tlsFiles
	// The site's own programs (handoff.go), by hook kind; "" for none.
	siteResume, siteSuspend, siteResumeFail string
}

// tlsFiles are the PEM files of mutual TLS: our certificate and key, and the bridge's CA.
type tlsFiles struct{ cert, key, ca string }

// settingsFromEnv reads SKB_* variables; unset or empty ones take the defaults, except
// SKB_HOOK_LOG, which may be set empty (stderr only).
func settingsFromEnv(getenv func(string) (string, bool)) settings {
	get := func(k string) string { v, _ := getenv(k); return v }
	s := settings{
		target:   get("SKB_SOCKET"),
		slurmBin: get("SKB_SLURM_BIN"),
		logPath:  defaultHookLog,
		timeoutS: defaultTimeoutS,
	}
	if s.target == "" {
		s.target = defaultTarget
	}
	if s.slurmBin == "" {
		s.slurmBin = defaultSlurmBin
	}
	if v, ok := getenv("SKB_HOOK_LOG"); ok {
		s.logPath = v
	}
	if f, ok := parseSeconds(get("SKB_TIMEOUT_S")); ok {
		s.timeoutS = f
	} // else: a typo must not stop nodes from being resumed
	cert, key, ca := get("SKB_TLS_CERT"), get("SKB_TLS_KEY"), get("SKB_TLS_CA")
	if cert != "" && key != "" && ca != "" {
		s.tls = &tlsFiles{cert, key, ca}
	}
	s.siteResume = get(sitePrograms["resume"])
	s.siteSuspend = get(sitePrograms["suspend"])
	s.siteResumeFail = get(sitePrograms["resume_fail"])
	return s
}

// parseSeconds reads SKB_TIMEOUT_S: ASCII digits with at most one '.', blanks (space, tab)
// around; more than 0 and at most maxTimeoutS. Anything else is not a number of seconds.
func parseSeconds(v string) (float64, bool) {
	t := strings.Trim(v, " \t")
	digits, dots := 0, 0
	for i := 0; i < len(t); i++ {
		switch {
		case t[i] >= '0' && t[i] <= '9':
			digits++
		case t[i] == '.':
			dots++
		default:
			return 0, false
		}
	}
	if digits == 0 || dots > 1 {
		return 0, false
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f <= 0 || f > maxTimeoutS {
		return 0, false
	}
	return f, true
}

// hookCall is one invocation: which hook, for which nodes, with what.
type hookCall struct {
	kind       string
	hostlist   string
	event      string // node_event only
	resumeFile string // resume only: $SLURM_RESUME_FILE's contents
}

// name is `resume` or `node_event:down`, as log lines show it.
func (c hookCall) name() string {
	if c.event != "" {
		return c.kind + ":" + c.event
	}
	return c.kind
}

// usageError: the hook was called with arguments Slurm would never pass.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// parseArgv reads `[kind, hostlist]` or `["node_event", event, hostlist]` (hooks.parse_argv).
func parseArgv(argv []string) (hookCall, error) {
	if len(argv) == 0 || !contains(hookKinds, argv[0]) {
		return hookCall{}, usageError{"first argument must be one of " + strings.Join(hookKinds, ", ")}
	}
	kind, rest := argv[0], argv[1:]
	if kind == "node_event" {
		if len(rest) != 2 || !contains(eventKinds, rest[0]) || rest[1] == "" {
			return hookCall{}, usageError{"usage: node_event <" + strings.Join(eventKinds, "|") + "> <hostlist>"}
		}
		return checkHostlist(hookCall{kind: kind, event: rest[0], hostlist: rest[1]})
	}
	if len(rest) != 1 || rest[0] == "" {
		return hookCall{}, usageError{"usage: " + kind + " <hostlist> (exactly one hostlist, as Slurm passes it)"}
	}
	return checkHostlist(hookCall{kind: kind, hostlist: rest[0]})
}

// checkHostlist refuses a hostlist with an undecodable byte: no Slurm hostlist has one.
func checkHostlist(c hookCall) (hookCall, error) {
	if !utf8.ValidString(c.hostlist) {
		return hookCall{}, usageError{"hostlist is not UTF-8"}
	}
	return c, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// readResumeFile returns $SLURM_RESUME_FILE's bytes, or nil and a note saying why it was not
// read; neither is fatal: the bridge resumes the hostlist without the per-job context. The bridge
// gets them as validUTF8 makes them; a site program the hook hands nodes to, as they are.
func readResumeFile(getenv func(string) (string, bool)) ([]byte, string) {
	path, _ := getenv("SLURM_RESUME_FILE")
	if path == "" {
		return nil, "no SLURM_RESUME_FILE"
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "cannot read SLURM_RESUME_FILE: " + strerror(err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, resumeFileMax+1))
	if err != nil {
		return nil, "cannot read SLURM_RESUME_FILE: " + strerror(err)
	}
	if len(raw) > resumeFileMax {
		return nil, fmt.Sprintf("SLURM_RESUME_FILE over %d bytes: not sent", resumeFileMax)
	}
	if raw == nil { // read, and empty: still not "not read"
		raw = []byte{}
	}
	return raw, ""
}

// validUTF8 is b with U+FFFD for each byte that is not part of a valid UTF-8 sequence: the resume
// file as the bridge gets it (its gRPC field is a UTF-8 string).
func validUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		sb.WriteRune(r) // RuneError for an invalid byte
		b = b[n:]
	}
	return sb.String()
}

// newRequestID is `<kind>-<pid>-<6 hex>`, as hooks.main makes it.
func newRequestID(kind string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", kind, os.Getpid(), hex.EncodeToString(b[:]))
}
