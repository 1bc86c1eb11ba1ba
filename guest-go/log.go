package ipam

import "fmt"

// Level is a log message's level (WIT enum `log.level`).
type Level uint8

const (
	LevelTrace Level = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
)

// Log writes a message to the host's log file (never stdout), at level.
func Log(level Level, format string, args ...any) { logAt(level, fmt.Sprintf(format, args...)) }

func Debugf(format string, args ...any) { Log(LevelDebug, format, args...) }
func Infof(format string, args ...any)  { Log(LevelInfo, format, args...) }
func Warnf(format string, args ...any)  { Log(LevelWarn, format, args...) }
func Errorf(format string, args ...any) { Log(LevelError, format, args...) }
