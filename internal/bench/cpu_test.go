package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// cpuMeter reads the CPU time used so far by this process (getrusage:
// every goroutine, the deliverer's and the receiver's alike) and by the
// PostgreSQL backends of the connections whose application_name is app,
// read from /proc/PID/schedstat (nanoseconds on a CPU; PostgreSQL runs a
// backend per process). It needs the server on this machine, as
// scripts/test.sh starts it; ok is false when a backend cannot be read.
// Unlike wall time, CPU time barely grows with the machine's load: a
// process waiting for a core spends none.
type cpuMeter struct {
	pool *pgxpool.Pool
	app  string
}

// cpuSample is one reading: the process's CPU and each backend's.
type cpuSample struct {
	self     time.Duration
	backends map[int]time.Duration
	ok       bool
}

func (m cpuMeter) sample(ctx context.Context) (cpuSample, error) {
	rows, err := m.pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, m.app)
	if err != nil {
		return cpuSample{}, fmt.Errorf("backends of %s: %w", m.app, err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return cpuSample{}, fmt.Errorf("backends of %s: %w", m.app, err)
	}
	s := cpuSample{backends: map[int]time.Duration{}, ok: len(pids) > 0}
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			s.ok = false
			continue
		}
		first, _, _ := strings.Cut(string(raw), " ")
		ns, err := strconv.ParseInt(strings.TrimSpace(first), 10, 64)
		if err != nil {
			s.ok = false
			continue
		}
		s.backends[pid] = time.Duration(ns)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuSample{}, fmt.Errorf("getrusage: %w", err)
	}
	s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return s, nil
}

// since is the CPU used from before to s: the process's and the
// backends' (a backend started meanwhile counts from zero).
func (s cpuSample) since(before cpuSample) (self, backends time.Duration, ok bool) {
	for pid, t := range s.backends {
		backends += t - before.backends[pid]
	}
	return s.self - before.self, backends, s.ok && before.ok
}
