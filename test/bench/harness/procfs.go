package benchharness

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// statFields returns a process's command name and the fields of
// /proc/<pid>/stat after it (field 3, the state, is index 0): the name
// may hold spaces, so fields are counted after its ')'.
func statFields(pid int) (comm string, fields []string, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", nil, err
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return "", nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	return string(b[open+1 : end]), strings.Fields(string(b[end+1:])), nil
}

// ProcessCPU is a process's CPU time so far, user plus system, from
// /proc/<pid>/stat (10 ms resolution).
func ProcessCPU(pid int) (time.Duration, error) {
	_, f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %v %v", pid, err1, err2)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// ProcessStatusBytes reads a size field of /proc/<pid>/status ("VmHWM:",
// "VmRSS:"), in bytes.
func ProcessStatusBytes(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// ChildrenNamed finds this process's children by command name: envtest
// starts kube-apiserver and etcd as children and does not export their
// process ids.
func ChildrenNamed(names ...string) map[string]int {
	out := map[string]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	self := strconv.Itoa(os.Getpid())
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		comm, f, err := statFields(pid)
		if err != nil || len(f) < 2 || f[1] != self {
			continue
		}
		for _, n := range names {
			if comm == n {
				out[n] = pid
			}
		}
	}
	return out
}

// MachineBusy is the CPU time every process on the machine used so far
// (/proc/stat's first line less idle and iowait), to tell how much of the
// machine something outside a bench took during a measurement.
func MachineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for i, s := range f[1:9] { // user nice system idle iowait irq softirq steal
		if i == 3 || i == 4 {
			continue
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += v
	}
	return time.Duration(busy) * time.Second / clockTicks, nil
}
