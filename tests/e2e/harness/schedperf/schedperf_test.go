// Package schedperf runs kube-scheduler's own scale benchmark (k8s.io/kubernetes
// test/integration/scheduler_perf, at the version harness/go.mod pins) on a
// test-case file of ours, optionally with the dra-quota extender in the loop.
//
// The benchmark brings up its own etcd, kube-apiserver and in-process
// kube-scheduler per workload; the scheduler's configuration comes from the
// test case's schedulerConfigPath (scheduler_perf.go setupTestCase ->
// setupClusterForWorkload), so the extender entry needs no change upstream.
// The hook upstream offers for what must run against that API server before
// the workload's operations is WithPrepareFn (options.go). Ours:
//
//   - writes a kubeconfig for the benchmark's API server
//     (test/utils/kubeconfig CreateKubeConfig),
//   - creates the Kueue CRDs the case's createAny operations need and waits
//     until they are Established,
//   - with SCHEDPERF_EXTENDER_BIN set, starts `dra-extender serve` watching
//     that API server on SCHEDPERF_EXTENDER_LISTEN (the address the scheduler
//     configuration names) and waits for its /readyz; at the workload's
//     cleanup, while the API server still runs (cleanups run last-in first-out),
//     it records the extender's /metrics, its CPU seconds and the number of
//     pods bound, then stops it.
//
// The driver is bench/scheduler_perf.py; it builds this package with
// `go test -c` and runs the binary once per case and mode, in the directory
// of the upstream configuration the case comes from, so that upstream's
// relative template paths resolve unchanged.
package schedperf

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/dynamic-resource-allocation/structured"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"
	"k8s.io/kubernetes/test/utils/kubeconfig"
	"sigs.k8s.io/yaml"
)

func TestMain(m *testing.M) {
	if err := perf.InitTests(); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	m.Run()
}

// BenchmarkPerfScheduling runs every test case of SCHEDPERF_CONFIG (label
// filter and -data-items-dir as upstream's flags) under the topic
// SCHEDPERF_TOPIC, whose thresholds apply. As upstream's dra benchmark does,
// the DRA allocator is the default one ("incubating").
func BenchmarkPerfScheduling(b *testing.B) {
	configFile := os.Getenv("SCHEDPERF_CONFIG")
	if configFile == "" {
		b.Fatal("SCHEDPERF_CONFIG (the test-case file) is not set")
	}
	topic := os.Getenv("SCHEDPERF_TOPIC")
	if topic == "" {
		topic = "dra"
	}
	structured.EnableAllocators("incubating")
	defer structured.EnableAllocators()
	perf.RunBenchmarkPerfScheduling(b, configFile, topic, nil, perf.WithPrepareFn(prepare))
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)

func prepare(tCtx ktesting.TContext) error {
	root := os.Getenv("SCHEDPERF_WORKDIR")
	if root == "" {
		root = os.TempDir()
	}
	dir := filepath.Join(root, unsafeChars.ReplaceAllString(tCtx.Name(), "_"))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	kubeconfigPath := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kubeconfig.CreateKubeConfig(tCtx.RESTConfig()), kubeconfigPath); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	if crds := os.Getenv("SCHEDPERF_CRDS"); crds != "" {
		if err := installCRDs(tCtx, crds); err != nil {
			return err
		}
	}
	if bin := os.Getenv("SCHEDPERF_EXTENDER_BIN"); bin != "" {
		return startExtender(tCtx, bin, dir, kubeconfigPath)
	}
	return nil
}

// installCRDs creates every CustomResourceDefinition in the YAML files of dir
// and waits until the API server serves them.
func installCRDs(tCtx ktesting.TContext, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	client := tCtx.APIExtensions().ApiextensionsV1().CustomResourceDefinitions()
	var names []string
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if _, err := client.Create(tCtx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create CRD %s: %w", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, name := range names {
		for {
			crd, err := client.Get(tCtx, name, metav1.GetOptions{})
			if err == nil && established(crd) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not established after 60s (last error: %v)", name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, condition := range crd.Status.Conditions {
		if condition.Type == apiextensionsv1.Established && condition.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// extenderRecord is what the driver reads per workload: the extender's CPU
// (its process and every descendant, user + system), the pods the scheduler
// scheduled in the workload (its scheduler_schedule_attempts_total with
// result="scheduled": steady-state workloads delete pods, so the pods bound
// at the end are fewer), the pods bound and existing at the end and the raw
// text of its /metrics.
type extenderRecord struct {
	CPUSeconds    float64 `json:"cpuSeconds"`
	PodsScheduled int     `json:"podsScheduled"`
	PodsBound     int     `json:"podsBound"`
	PodsTotal     int     `json:"podsTotal"`
	Metrics       string  `json:"metrics"`
}

// scheduledPods reads the in-process scheduler's scheduled attempts from the
// legacy registry, which upstream resets only after the workload's cleanups
// that were registered after its own (this one) have run.
func scheduledPods() int {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, family := range families {
		if family.GetName() != "scheduler_schedule_attempts_total" {
			continue
		}
		for _, metric := range family.GetMetric() {
			for _, label := range metric.GetLabel() {
				if label.GetName() == "result" && label.GetValue() == "scheduled" {
					total += metric.GetCounter().GetValue()
				}
			}
		}
	}
	return int(total)
}

func startExtender(tCtx ktesting.TContext, bin, dir, kubeconfigPath string) error {
	listen := os.Getenv("SCHEDPERF_EXTENDER_LISTEN")
	if listen == "" {
		return fmt.Errorf("SCHEDPERF_EXTENDER_LISTEN (the address the scheduler configuration names) is not set")
	}
	args := []string{"serve", "--kubeconfig", kubeconfigPath, "--listen", listen}
	if config := os.Getenv("SCHEDPERF_EXTENDER_CONFIG"); config != "" {
		args = append(args, "--config", config)
	}
	logFile, err := os.Create(filepath.Join(dir, "extender.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// The extender's temporary directory holds its reservation journal: one per workload, never shared.
	cmd.Env = append(os.Environ(), "TMPDIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("start %s: %w", bin, err)
	}
	base := "http://" + listen
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		_ = logFile.Close()
	}
	if err := waitReady(base+"/readyz", 180*time.Second); err != nil {
		stop()
		return fmt.Errorf("extender not ready (log: %s): %w", logFile.Name(), err)
	}
	tCtx.Cleanup(func() {
		record := extenderRecord{CPUSeconds: treeCPUSeconds(cmd.Process.Pid), PodsScheduled: scheduledPods()}
		if pods, err := tCtx.Client().CoreV1().Pods("").List(tCtx, metav1.ListOptions{}); err == nil {
			record.PodsTotal = len(pods.Items)
			for _, pod := range pods.Items {
				if pod.Spec.NodeName != "" {
					record.PodsBound++
				}
			}
		}
		if response, err := http.Get(base + "/metrics"); err == nil {
			var text strings.Builder
			buffer := make([]byte, 1<<16)
			for {
				n, readErr := response.Body.Read(buffer)
				text.Write(buffer[:n])
				if readErr != nil {
					break
				}
			}
			_ = response.Body.Close()
			record.Metrics = text.String()
		}
		stop()
		if data, err := json.Marshal(record); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "extender.json"), data, 0o640)
		}
	})
	return nil
}

func waitReady(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := http.Client{Timeout: 2 * time.Second}
	var last error
	for time.Now().Before(deadline) {
		response, err := client.Get(url)
		if err == nil {
			_ = response.Body.Close()
			if response.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("%s answered %d", url, response.StatusCode)
		} else {
			last = err
		}
		time.Sleep(250 * time.Millisecond)
	}
	return last
}

// treeCPUSeconds sums utime + stime (/proc/<pid>/stat fields 14 and 15, in
// clock ticks of 100 Hz on Linux) of pid and all its descendants.
func treeCPUSeconds(pid int) float64 {
	parents := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	ticks := map[int]float64{}
	for _, entry := range entries {
		child, err := strconv.Atoi(entry.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", entry.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name (field 2) may hold spaces; the fields after it follow the last ')'.
		fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		if len(fields) < 13 {
			continue
		}
		parent, _ := strconv.Atoi(fields[1])
		utime, _ := strconv.ParseFloat(fields[11], 64)
		stime, _ := strconv.ParseFloat(fields[12], 64)
		parents[parent] = append(parents[parent], child)
		ticks[child] = utime + stime
	}
	total := 0.0
	queue := []int{pid}
	for len(queue) > 0 {
		current := queue[0]
		queue = queue[1:]
		total += ticks[current]
		queue = append(queue, parents[current]...)
	}
	return total / 100
}
