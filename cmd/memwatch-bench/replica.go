package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// replicaBench measures what replicating the state to a bucket costs the
// daemon: its CPU under 100 appends a second with and without replicate:
// (the bucket a real S3 server, versitygw from test/s3server, on this
// machine), and its CPU when idle with it.
func replicaBench(bin, dir string, secs int) []row {
	addr, stop := startS3(dir, "replica")
	defer stop()
	replicate := fmt.Sprintf("replicate:\n  url: s3://bench/state\n  endpoint: http://%s\n  access_key_env: BENCH_S3_KEY\n  secret_key_env: BENCH_S3_SECRET\n  force_path_style: true\n", addr)
	if v := os.Getenv("BENCH_SYNC_INTERVAL"); v != "" {
		replicate += "  sync_interval: " + v + "\n"
	}
	env := []string{"BENCH_S3_KEY=bench", "BENCH_S3_SECRET=bench-secret-0123456789"}

	const rate = 100
	cpu := func(name, extra string) (busy, idle float64) {
		fmt.Fprintf(os.Stderr, "replica: %s, %d appends/s for %d s, then idle...\n", name, rate, secs)
		d := startWindowDaemonWith(bin, filepath.Join(dir, "replica-"+name), 0, extra, env)
		w := newSessionWriter(filepath.Join(d.root, "sessions", "s.jsonl"))
		t0 := time.Now()
		warm := t0.Add(time.Duration(secs) * time.Second / 5)
		var c0 float64
		for n := 0; time.Since(t0) < time.Duration(secs)*time.Second; n++ {
			time.Sleep(time.Until(t0.Add(time.Duration(n) * time.Second / rate)))
			if c0 == 0 && time.Now().After(warm) {
				c0 = cpuSeconds(d.cmd.Process.Pid)
			}
			w.message(n)
		}
		busy = (cpuSeconds(d.cmd.Process.Pid) - c0) / (time.Since(warm).Seconds())
		w.close()
		time.Sleep(5 * time.Second) // the last jobs and syncs
		i0 := cpuSeconds(d.cmd.Process.Pid)
		time.Sleep(10 * time.Second)
		idle = (cpuSeconds(d.cmd.Process.Pid) - i0) / 10
		d.stop()
		return busy, idle
	}
	plainBusy, plainIdle := cpu("plain", "")
	repBusy, repIdle := cpu("replicated", replicate)
	added := repBusy - plainBusy
	return []row{
		{fmt.Sprintf("replica: CPU at %d appends/s, without replicate", rate), fmt.Sprintf("%.1f%% of a core", 100*plainBusy), "", ""},
		{fmt.Sprintf("replica: CPU at %d appends/s, replicated to S3", rate), fmt.Sprintf("%.1f%% (+%.1f points)", 100*repBusy, 100*added), "<= +5 points", verdict(added <= 0.05)},
		{"replica: CPU idle, without / with replicate", fmt.Sprintf("%.2f%% / %.2f%% of a core", 100*plainIdle, 100*repIdle), "~0 (< 1%)", verdict(repIdle < 0.01)},
	}
}

// startS3 builds versitygw (test/s3server) and serves a bucket "bench" from
// dir on a free loopback port: the bucket of the replica and fleet
// benchmarks. stop ends it.
func startS3(dir, bench string) (addr string, stop func()) {
	gw := filepath.Join(dir, "versitygw")
	build := exec.Command("go", "build", "-o", gw, "github.com/versity/versitygw/cmd/versitygw")
	build.Dir = filepath.Join("test", "s3server")
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		fail(fmt.Errorf("%s: build versitygw: %v\n%s", bench, err, out))
	}
	data := filepath.Join(dir, "s3")
	os.MkdirAll(filepath.Join(data, "bench"), 0o755)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	addr = l.Addr().String()
	l.Close()
	srv := dieWithUs(exec.Command(gw, "--port", addr, "posix", data))
	srv.Env = append(os.Environ(), "ROOT_ACCESS_KEY=bench", "ROOT_SECRET_KEY=bench-secret-0123456789")
	if err := srv.Start(); err != nil {
		fail(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			fail(fmt.Errorf("%s: versitygw did not listen on %s", bench, addr))
		}
	}
	return addr, func() { srv.Process.Kill(); srv.Wait() }
}
