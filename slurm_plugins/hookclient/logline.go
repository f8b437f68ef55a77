package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"
)

// pyRepr renders s as Python's repr() of a str does, so log lines match bridge/hooks.py's
// `note='…'`, `error='…'` and `first_not_ok='…'` byte for byte.
func pyRepr(s string) string {
	quote := byte('\'')
	if strings.Contains(s, "'") && !strings.Contains(s, "\"") {
		quote = '"'
	}
	var sb strings.Builder
	sb.WriteByte(quote)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			// Python holds an undecodable argv byte as a lone surrogate (surrogateescape).
			fmt.Fprintf(&sb, "\\udc%02x", s[i])
			i++
			continue
		}
		i += n
		switch {
		case r == rune(quote) || r == '\\':
			sb.WriteByte('\\')
			sb.WriteRune(r)
		case r == '\t':
			sb.WriteString(`\t`)
		case r == '\n':
			sb.WriteString(`\n`)
		case r == '\r':
			sb.WriteString(`\r`)
		case r < ' ' || r == 0x7f:
			fmt.Fprintf(&sb, "\\x%02x", r)
		case r < 0x7f || r == ' ' || (unicode.IsPrint(r) && r != '\u00ad'):
			sb.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(&sb, "\\x%02x", r)
		case r <= 0xffff:
			fmt.Fprintf(&sb, "\\u%04x", r)
		default:
			fmt.Fprintf(&sb, "\\U%08x", r)
		}
	}
	sb.WriteByte(quote)
	return sb.String()
}

// pyListRepr renders a list of str as Python's repr() does: ['a', "b'c"].
func pyListRepr(items []string) string {
	parts := make([]string, len(items))
	for i, s := range items {
		parts[i] = pyRepr(s)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// strerror is the C library's text for the errno under err ("No such file or directory"), as
// Python's OSError.strerror gives it; Go's own table has the same words in lower case.
func strerror(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return capitalize(errno.Error())
	}
	return err.Error()
}

// pyOSError renders err as str(OSError) does: `[Errno 2] No such file or directory: '/x'`.
func pyOSError(err error, path string) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err.Error()
	}
	return fmt.Sprintf("[Errno %d] %s: %s", int(errno), capitalize(errno.Error()), pyRepr(path))
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// logLine is one hook log line: `<time> slurm-k8s-bridge-hook[<pid>] <message>\n`.
func logLine(now time.Time, pid int, message string) string {
	return fmt.Sprintf("%s slurm-k8s-bridge-hook[%d] %s\n", now.Format("2006-01-02T15:04:05-0700"), pid, message)
}

// elapsed is `elapsed_ms=N`, rounded as Python's `:.0f` does.
func elapsed(start time.Time) string {
	return fmt.Sprintf("elapsed_ms=%.0f", float64(time.Since(start).Nanoseconds())/1e6)
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
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		fmt.Fprintf(os.Stderr, "slurm-k8s-bridge-hook: cannot write %s: %s\n", logPath, pyOSError(err, logPath))
	}
}
