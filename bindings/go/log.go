// Process-wide logging: the library's messages (a backend fallback and why, a tier
// disabled by its options, a corrupt disk block, a failed disk write) delivered to a Go
// function. Safe for concurrent use.

package kvtier

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// LogLevel is the severity of a library message. The values are log/slog's (Debug -4,
// Info 0, Warn 4, Error 8), so slog.Level(level) converts one.
type LogLevel int

// The levels of kvt_log_level, with log/slog's values.
const (
	LevelDebug LogLevel = -4 // detail for chasing a problem
	LevelInfo  LogLevel = 0  // a notable event in normal operation
	LevelWarn  LogLevel = 4  // something went wrong and was handled; service goes on
	LevelError LogLevel = 8  // something failed that a caller also sees as an error
)

// String is the level's name as log/slog prints it: "DEBUG", "INFO", "WARN", "ERROR".
func (l LogLevel) String() string {
	switch l {
	case LevelDebug:
		return "DEBUG"
	case LevelInfo:
		return "INFO"
	case LevelWarn:
		return "WARN"
	case LevelError:
		return "ERROR"
	}
	return fmt.Sprintf("LogLevel(%d)", int(l))
}

// LogFunc receives one library message (one line, saying what happened and why).
type LogFunc func(level LogLevel, message string)

var (
	logMu   sync.Mutex // serialises SetLogFunc
	logFunc atomic.Pointer[LogFunc]
)

func currentLogFunc() LogFunc {
	if p := logFunc.Load(); p != nil {
		return *p
	}
	return nil
}

func levelFromC(level int32) LogLevel {
	switch level {
	case 0:
		return LevelDebug
	case 1:
		return LevelInfo
	case 2:
		return LevelWarn
	}
	return LevelError
}

func levelToC(level LogLevel) int32 {
	switch {
	case level <= LevelDebug:
		return 0
	case level <= LevelInfo:
		return 1
	case level <= LevelWarn:
		return 2
	}
	return 3
}

// SetLogFunc sends the library's messages at minLevel and above to fn, for the whole
// process (nil: off, the default; the library never writes to stderr by itself). fn may
// be called from any goroutine or thread, several at once — the library's disk I/O threads
// log too — so it must be safe for concurrent use, return quickly and not call kvtier (a
// context's lock may be held while it runs). Once SetLogFunc
// returns, the previous function is never called again. With Go 1.21 or later, log/slog
// takes the messages as they are:
//
//	kvtier.SetLogFunc(func(l kvtier.LogLevel, m string) {
//		slog.Log(context.Background(), slog.Level(l), m)
//	}, kvtier.LevelInfo)
func SetLogFunc(fn LogFunc, minLevel LogLevel) error {
	logMu.Lock()
	defer logMu.Unlock()
	if fn == nil {
		err := setLogCallback(false, 0)
		logFunc.Store(nil)
		return err
	}
	logFunc.Store(&fn) // before the library can call: no message is lost
	return setLogCallback(true, levelToC(minLevel))
}
