package replica

import "fmt"

// raftLogger routes raft's logging to the replica's logger. Raft's own
// progress (a node started, became follower, candidate or leader, votes
// received: some twenty lines per start) is debug output, shown when
// CoreDNS's *debug* plugin is on; the replica logs at INFO the events an
// operator acts on (member started, leader elected, member added or
// removed, snapshot sent), and raft's warnings and errors stay what they
// are. Raft's own debug output is left out.
type raftLogger struct{ l Logger }

func (r raftLogger) Debug(v ...any)                   {}
func (r raftLogger) Debugf(format string, v ...any)   {}
func (r raftLogger) Error(v ...any)                   { r.l.Errorf("raft: %s", fmt.Sprint(v...)) }
func (r raftLogger) Errorf(format string, v ...any)   { r.l.Errorf("raft: "+format, v...) }
func (r raftLogger) Info(v ...any)                    { r.l.Debugf("raft: %s", fmt.Sprint(v...)) }
func (r raftLogger) Infof(format string, v ...any)    { r.l.Debugf("raft: "+format, v...) }
func (r raftLogger) Warning(v ...any)                 { r.l.Warningf("raft: %s", fmt.Sprint(v...)) }
func (r raftLogger) Warningf(format string, v ...any) { r.l.Warningf("raft: "+format, v...) }
func (r raftLogger) Fatal(v ...any)                   { panic(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(format string, v ...any)   { panic(fmt.Sprintf(format, v...)) }
func (r raftLogger) Panic(v ...any)                   { panic(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(format string, v ...any)   { panic(fmt.Sprintf(format, v...)) }
