package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// The log line is `<time> slurm-k8s-bridge-hook[<pid>] <name> key=value ...`, one per call. A
// value is written bare when it is non-empty and each of its bytes is in bareBytes; any other
// value is a JSON string (see jsonString). bridge/hooks.py's log_value writes the same bytes.
const bareBytes = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.,:/=@+[]~"

// logValue is a log line's value: bare when it can be, else a JSON string.
func logValue(s string) string {
	if s == "" {
		return `""`
	}
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(bareBytes, s[i]) < 0 {
			return jsonString(s)
		}
	}
	return s
}

// jsonString writes s as a JSON string (RFC 8259) in which `"` `\` \b \f \n \r \t are escaped so,
// and U+0000-U+001F, U+007F-U+009F, U+2028 and U+2029 as \u00xx / \u2028: no character of the
// line splits it, for any reader's notion of a line. Every other character is itself, in UTF-8.
// A byte that is not part of valid UTF-8 (an undecodable argv or environment byte) is written
// \udcxx, the code point Python's surrogateescape holds it as, so the bytes can be recovered.
// (encoding/json would leave U+0085 and C1 controls as they are and make bad bytes \ufffd.)
func jsonString(s string) string {
	var sb strings.Builder
	sb.Grow(len(s) + 2)
	sb.WriteByte('"')
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&sb, `\udc%02x`, s[i])
		case r == '"':
			sb.WriteString(`\"`)
		case r == '\\':
			sb.WriteString(`\\`)
		case r == '\b':
			sb.WriteString(`\b`)
		case r == '\f':
			sb.WriteString(`\f`)
		case r == '\n':
			sb.WriteString(`\n`)
		case r == '\r':
			sb.WriteString(`\r`)
		case r == '\t':
			sb.WriteString(`\t`)
		case r < 0x20, r >= 0x7f && r < 0xa0, r == '\u2028', r == '\u2029':
			fmt.Fprintf(&sb, `\u%04x`, r)
		default:
			sb.WriteString(s[i : i+n])
		}
		i += n
	}
	sb.WriteByte('"')
	return sb.String()
}

// logList is a list (argv) in a log line: `[` JSON strings joined by `,` `]`, no spaces.
func logList(items []string) string {
	parts := make([]string, len(items))
	for i, s := range items {
		parts[i] = jsonString(s)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// strerror is the C library's text for the errno under err ("No such file or directory"): the
// words the contract uses for an OS error. Go's own table has them with a lower-case initial.
func strerror(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		text := errno.Error()
		if text != "" {
			text = strings.ToUpper(text[:1]) + text[1:]
		}
		return text
	}
	return err.Error()
}

// logLine is one hook log line: `<time> slurm-k8s-bridge-hook[<pid>] <message>\n`.
func logLine(now time.Time, pid int, message string) string {
	return fmt.Sprintf("%s slurm-k8s-bridge-hook[%d] %s\n", now.Format("2006-01-02T15:04:05-0700"), pid, message)
}

// elapsed is `elapsed_ms=N`: whole milliseconds, truncated.
func elapsed(start time.Time) string {
	return "elapsed_ms=" + strconv.FormatInt(time.Since(start).Milliseconds(), 10)
}

// writeLog writes one line to stderr and, when configured, appends it to the hook log with one
// write() under O_APPEND, which keeps lines whole when several hooks log at once. slurmctld
// starts hooks with fd 2 closed; Go's runtime then puts /dev/null there, so writing is harmless.
func writeLog(logPath, line string) {
	_, _ = os.Stderr.WriteString(line)
	if logPath == "" {
		return
	}
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err == nil {
		_, err = f.Write([]byte(line))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "slurm-k8s-bridge-hook: cannot write %s: %s\n", logPath, strerror(err))
	}
}
