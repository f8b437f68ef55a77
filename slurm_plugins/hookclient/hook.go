// Command skb-hook is what slurmctld runs as ResumeProgram, SuspendProgram, ResumeFailProgram and
// strigger program: bridge/hooks.py's contract in a static binary that starts in milliseconds.
//
//	skb-hook resume|suspend|resume_fail <hostlist>
//	skb-hook node_event down|drain|fail|up|idle <hostlist>
//
// Same settings (SKB_* environment, which hook.sh reads from hooks.env), the same RPCs and request
// fields, the same retries inside one deadline, the same log line and the same failure handling
// (a resume the bridge did not take sets its nodes DOWN through scontrol), and the same exit
// status: 0 the bridge took the call, 1 it did not, 2 bad arguments. tests/unit/test_hook_client.py
// runs this and `python -m bridge.hooks` side by side against one server and compares them.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math"
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
	// resumeFileMax is the biggest resume file sent on, in characters (hooks.RESUME_FILE_MAX, the
	// bridge's own limit): a bigger one would fail the whole batch, the hostlist alone suffices.
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
	if v := get("SKB_TIMEOUT_S"); v != "" {
		if f, ok := parsePyFloat(v); ok {
			s.timeoutS = f
		} // else: a typo must not stop nodes from being resumed
	}
	cert, key, ca := get("SKB_TLS_CERT"), get("SKB_TLS_KEY"), get("SKB_TLS_CA")
	if cert != "" && key != "" && ca != "" {
		s.tls = &tlsFiles{cert, key, ca}
	}
	return s
}

// parsePyFloat accepts what Python's float() does for a setting: surrounding blanks, a sign,
// exponents, inf/nan and underscores between digits.
func parsePyFloat(v string) (float64, bool) {
	v = strings.TrimSpace(v)
	if strings.Contains(v, "_") {
		for i, r := range v {
			if r == '_' && (i == 0 || i == len(v)-1 || !isDigit(v[i-1]) || !isDigit(v[i+1])) {
				return 0, false
			}
		}
		v = strings.ReplaceAll(v, "_", "")
	}
	if strings.HasPrefix(strings.TrimLeft(v, "+-"), "0x") || strings.HasPrefix(strings.TrimLeft(v, "+-"), "0X") {
		return 0, false // Go reads hex floats; Python's float() does not
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil && !(errorsIsRange(err) && math.IsInf(f, 0)) {
		return 0, false
	}
	return f, true
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

func errorsIsRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
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
		return hookCall{kind: kind, event: rest[0], hostlist: rest[1]}, nil
	}
	if len(rest) != 1 || rest[0] == "" {
		return hookCall{}, usageError{"usage: " + kind + " <hostlist> (exactly one hostlist, as Slurm passes it)"}
	}
	return hookCall{kind: kind, hostlist: rest[0]}, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// readResumeFile returns $SLURM_RESUME_FILE's text and a note when it could not be read; neither
// is fatal: the bridge resumes the hostlist without the per-job context. Read as Python's text
// mode does (UTF-8 with replacement, universal newlines) so both hooks send the same string.
func readResumeFile(getenv func(string) (string, bool)) (string, string) {
	path, _ := getenv("SLURM_RESUME_FILE")
	if path == "" {
		return "", "no SLURM_RESUME_FILE"
	}
	f, err := os.Open(path)
	if err != nil {
		return "", "cannot read SLURM_RESUME_FILE: " + strerror(err)
	}
	defer f.Close()
	// A character takes at most 4 bytes: this many always holds resumeFileMax+1 characters.
	raw, err := io.ReadAll(io.LimitReader(f, 4*(resumeFileMax+1)))
	if err != nil {
		return "", "cannot read SLURM_RESUME_FILE: " + strerror(err)
	}
	text := universalNewlines(validUTF8(raw))
	if utf8.RuneCountInString(text) > resumeFileMax {
		return "", fmt.Sprintf("SLURM_RESUME_FILE over %d characters: not sent", resumeFileMax)
	}
	return text, ""
}

// validUTF8 decodes as Python's errors="replace": U+FFFD for each invalid byte.
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

func universalNewlines(s string) string {
	if !strings.Contains(s, "\r") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
}

// newRequestID is `<kind>-<pid>-<6 hex>`, as hooks.main makes it.
func newRequestID(kind string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", kind, os.Getpid(), hex.EncodeToString(b[:]))
}
