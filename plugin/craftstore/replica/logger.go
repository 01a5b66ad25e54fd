package replica

import "fmt"

// raftLogger routes raft's logging to the replica's logger, leaving out
// raft's debug output.
type raftLogger struct{ l Logger }

func (r raftLogger) Debug(v ...any)                   {}
func (r raftLogger) Debugf(format string, v ...any)   {}
func (r raftLogger) Error(v ...any)                   { r.l.Errorf("raft: %s", fmt.Sprint(v...)) }
func (r raftLogger) Errorf(format string, v ...any)   { r.l.Errorf("raft: "+format, v...) }
func (r raftLogger) Info(v ...any)                    { r.l.Infof("raft: %s", fmt.Sprint(v...)) }
func (r raftLogger) Infof(format string, v ...any)    { r.l.Infof("raft: "+format, v...) }
func (r raftLogger) Warning(v ...any)                 { r.l.Warningf("raft: %s", fmt.Sprint(v...)) }
func (r raftLogger) Warningf(format string, v ...any) { r.l.Warningf("raft: "+format, v...) }
func (r raftLogger) Fatal(v ...any)                   { panic(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(format string, v ...any)   { panic(fmt.Sprintf(format, v...)) }
func (r raftLogger) Panic(v ...any)                   { panic(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(format string, v ...any)   { panic(fmt.Sprintf(format, v...)) }
