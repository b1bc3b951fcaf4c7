package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kube is a running kube-apiserver backed by an embedded etcd, or by the etcd
// cluster given in KubeOptions.EtcdServers.
type Kube struct {
	Client     kubernetes.Interface
	Dynamic    dynamic.Interface
	RESTConfig *rest.Config
	// Kubeconfig authenticates as a system:masters user with a bearer
	// token and a client certificate (as Talos's admin kubeconfig does:
	// Talos's own Kubernetes client insists on one). It is a secret: never
	// log it or write it outside a 0600 file in a private temp dir.
	Kubeconfig []byte
	// Stop kills the apiserver's process group, stops its embedded etcd (not
	// a cluster given in KubeOptions.EtcdServers) and removes the
	// working directory. It is safe to call more than once.
	Stop func()
	// Restart kills the apiserver process and starts a new one on the same
	// port with the same credentials and etcd, returning once it is ready:
	// a fresh process with empty watch caches, as a kube-apiserver static
	// pod recreated by the kubelet. The simulator calls it after etcd was
	// restored from a snapshot (its data went back in time).
	Restart func(ctx context.Context) error
}

const (
	startTimeout = 2 * time.Minute
	stopTimeout  = 10 * time.Second
	pollInterval = 50 * time.Millisecond
	adminUser    = "talosbot-testenv-admin"
	// portAttempts bounds retries when the port picked for the apiserver
	// was taken by someone else between picking and binding.
	portAttempts = 3
)

// KubeOptions change how StartKubeWith and StartKubeProcessWith run the apiserver.
type KubeOptions struct {
	// EtcdServers, when set, are the client URLs of an etcd cluster the
	// apiserver stores into (the simulator's control-plane members, so that
	// their snapshots hold real /registry keys); no embedded etcd is started
	// and Stop leaves that cluster alone. Empty: a private embedded etcd.
	EtcdServers []string
}

// StartKube starts etcd and kube-apiserver for a test, installs the Flux
// CRDs and the flux-system namespace, and registers cleanup with t.Cleanup.
// Without a kube-apiserver binary it skips (or fails in CI, see Require).
func StartKube(t testing.TB) *Kube {
	t.Helper()
	return StartKubeWith(t, KubeOptions{})
}

// StartKubeWith is StartKube with options.
func StartKubeWith(t testing.TB, o KubeOptions) *Kube {
	t.Helper()
	bin, err := KubeAPIServerPath()
	Require(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	k, err := startKube(ctx, t.TempDir(), bin, o)
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(k.Stop)
	return k
}

// KubeStarter is for a kube-apiserver that must start later, on an etcd
// cluster that does not exist yet (the simulator's, through
// sim.Options.KubeOnEtcd). It looks for the binary now, skipping or failing
// t as Require does, and returns a function that starts the apiserver
// storing into etcdServers; t's cleanup stops it. The function returns
// errors instead of failing t, as it runs inside the caller's start-up.
func KubeStarter(t testing.TB) func(ctx context.Context, etcdServers []string) (*Kube, error) {
	t.Helper()
	bin, err := KubeAPIServerPath()
	Require(t, err)
	dir := t.TempDir()
	return func(ctx context.Context, etcdServers []string) (*Kube, error) {
		if len(etcdServers) == 0 {
			return nil, errors.New("testenv: KubeStarter needs at least one etcd server")
		}
		work, err := os.MkdirTemp(dir, "kube-")
		if err != nil {
			return nil, fmt.Errorf("create kube work dir: %w", err)
		}
		ctx, cancel := context.WithTimeout(ctx, startTimeout)
		defer cancel()
		k, err := startKube(ctx, work, bin, KubeOptions{EtcdServers: etcdServers})
		if err != nil {
			return nil, fmt.Errorf("start kube-apiserver on %v: %w", etcdServers, err)
		}
		t.Cleanup(k.Stop)
		return k, nil
	}
}

// StartKubeProcess is StartKube for callers without a testing.TB (the demo).
// Files go to a new private directory under dir (os.TempDir() if empty),
// which Stop removes. ctx bounds start-up only; the caller must call Stop.
func StartKubeProcess(ctx context.Context, dir string) (*Kube, error) {
	return StartKubeProcessWith(ctx, dir, KubeOptions{})
}

// StartKubeProcessWith is StartKubeProcess with options.
func StartKubeProcessWith(ctx context.Context, dir string, o KubeOptions) (*Kube, error) {
	bin, err := KubeAPIServerPath()
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(dir, "talosbot-kube-")
	if err != nil {
		return nil, fmt.Errorf("create kube work dir: %w", err)
	}
	k, err := startKube(ctx, work, bin, o)
	if err != nil {
		_ = os.RemoveAll(work)
		return nil, err
	}
	stop := k.Stop
	k.Stop = sync.OnceFunc(func() {
		stop()
		_ = os.RemoveAll(work)
	})
	return k, nil
}

// startKube does the work in dir, which the caller owns.
func startKube(ctx context.Context, dir, bin string, o KubeOptions) (_ *Kube, err error) {
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("restrict %s: %w", dir, err)
	}
	etcdURL := strings.Join(o.EtcdServers, ",")
	stopEtcd := func() {}
	if len(o.EtcdServers) == 0 {
		etcd, u, err := startEtcd(ctx, filepath.Join(dir, "etcd"))
		if err != nil {
			return nil, err
		}
		etcdURL, stopEtcd = u, etcd.Close
	}
	defer func() {
		if err != nil {
			stopEtcd()
		}
	}()

	files, err := writeAPIServerFiles(dir)
	if err != nil {
		return nil, err
	}

	for attempt := 1; ; attempt++ {
		k, proc, err := startAPIServerOnce(ctx, bin, dir, files, etcdURL)
		if err == nil {
			var mu sync.Mutex // guards proc against Stop during Restart
			stopped := false
			k.Stop = sync.OnceFunc(func() {
				mu.Lock()
				defer mu.Unlock()
				stopped = true
				proc.stop()
				stopEtcd()
			})
			port := proc.port
			k.Restart = func(ctx context.Context) error {
				mu.Lock()
				defer mu.Unlock()
				if stopped {
					return errors.New("testenv: kube-apiserver was stopped; it cannot restart")
				}
				proc.stop()
				p, err := startAPIServer(bin, dir, apiserverArgs(files, etcdURL, port))
				if err != nil {
					return err
				}
				p.port = port
				proc = p
				return p.waitReady(ctx, k.Client.Discovery().RESTClient())
			}
			return k, nil
		}
		if !errors.Is(err, errPortInUse) || attempt == portAttempts {
			return nil, err
		}
	}
}

// startAPIServerOnce starts kube-apiserver on a free port and returns once it
// is ready with the Flux CRDs served. On error the process is stopped.
func startAPIServerOnce(ctx context.Context, bin, dir string, files apiserverFiles, etcdURL string) (_ *Kube, _ *apiserverProc, err error) {
	port, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	proc, err := startAPIServer(bin, dir, apiserverArgs(files, etcdURL, port))
	if err != nil {
		return nil, nil, err
	}
	proc.port = port
	defer func() {
		if err != nil {
			proc.stop()
		}
	}()
	k, err := newKube(restConfig(port, files), files.client)
	if err != nil {
		return nil, nil, err
	}
	// Create the CRDs while the apiserver runs its post-start hooks:
	// creates of custom resources stall for 2s right after a CRD is
	// established, and this hides most of that window in start-up.
	crdCtx, cancelCRDs := context.WithCancel(ctx)
	defer cancelCRDs()
	crdErr := make(chan error, 1)
	go func() { crdErr <- createFluxCRDs(crdCtx, k.Dynamic) }()
	if err := proc.waitReady(ctx, k.Client.Discovery().RESTClient()); err != nil {
		cancelCRDs()
		<-crdErr
		return nil, nil, err
	}
	if err := <-crdErr; err != nil {
		return nil, nil, err
	}
	if err := installBase(ctx, k); err != nil {
		return nil, nil, err
	}
	return k, proc, nil
}

func startEtcd(ctx context.Context, dir string) (*embed.Etcd, string, error) {
	cfg := embed.NewConfig()
	cfg.Name = "testenv"
	cfg.Dir = dir
	// Port 0: the kernel picks free ports, so parallel tests never collide.
	local := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls = []url.URL{local}
	cfg.AdvertiseClientUrls = []url.URL{local}
	cfg.ListenPeerUrls = []url.URL{local}
	cfg.AdvertisePeerUrls = []url.URL{local}
	cfg.InitialCluster = cfg.Name + "=" + local.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// Test data is thrown away: skip fsync, it dominates start-up on slow disks.
	cfg.UnsafeNoFsync = true
	// A single member elects itself after one election timeout; the default
	// (1s) would be most of etcd's start-up time.
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("start embedded etcd in %s: %w", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, "", fmt.Errorf("embedded etcd failed: %w", err)
	case <-ctx.Done():
		e.Close()
		return nil, "", fmt.Errorf("waiting for embedded etcd: %w", ctx.Err())
	}
	return e, "http://" + e.Clients[0].Addr().String(), nil
}

type apiserverFiles struct {
	cert                            servingCert
	client                          clientCert
	clientCAFile                    string
	token                           string
	certFile, keyFile               string
	saKeyFile, saPubFile, tokenFile string
}

// writeAPIServerFiles writes the serving cert, service-account key and the
// static token file, all 0600 inside dir.
func writeAPIServerFiles(dir string) (apiserverFiles, error) {
	var f apiserverFiles
	var err error
	if f.cert, err = newServingCert(time.Now()); err != nil {
		return f, err
	}
	saPriv, saPub, err := newServiceAccountKey()
	if err != nil {
		return f, err
	}
	if f.token, err = randomToken(); err != nil {
		return f, err
	}
	if f.client, err = newClientCert(time.Now(), adminUser); err != nil {
		return f, err
	}
	pki := filepath.Join(dir, "pki")
	if err := os.Mkdir(pki, 0o700); err != nil {
		return f, fmt.Errorf("create %s: %w", pki, err)
	}
	f.certFile = filepath.Join(pki, "apiserver.crt")
	f.keyFile = filepath.Join(pki, "apiserver.key")
	f.saKeyFile = filepath.Join(pki, "sa.key")
	f.saPubFile = filepath.Join(pki, "sa.pub")
	f.tokenFile = filepath.Join(pki, "tokens.csv")
	f.clientCAFile = filepath.Join(pki, "client-ca.crt")
	// Static token file format: token,user,uid,"group1,group2".
	tokens := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", f.token, adminUser, adminUser)
	for name, data := range map[string][]byte{
		f.certFile:     f.cert.certPEM,
		f.keyFile:      f.cert.keyPEM,
		f.saKeyFile:    saPriv,
		f.saPubFile:    saPub,
		f.tokenFile:    []byte(tokens),
		f.clientCAFile: f.client.caPEM,
	} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			return f, fmt.Errorf("write %s: %w", filepath.Base(name), err)
		}
	}
	return f, nil
}

func apiserverArgs(f apiserverFiles, etcdURL string, port int) []string {
	return []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + f.certFile,
		"--tls-private-key-file=" + f.keyFile,
		"--token-auth-file=" + f.tokenFile,
		"--client-ca-file=" + f.clientCAFile,
		"--authorization-mode=RBAC",
		// As on Talos (kube-apiserver's static pod): kube-proxy and CNI pods are privileged.
		"--allow-privileged=true",
		"--anonymous-auth=false",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + f.saPubFile,
		"--service-account-signing-key-file=" + f.saKeyFile,
		"--service-cluster-ip-range=10.96.0.0/16",
		// No controller-manager creates default service accounts, so the
		// ServiceAccount admission plugin would reject every pod.
		"--disable-admission-plugins=ServiceAccount",
		// Priority-and-fairness bootstraps many objects and slows readiness;
		// tests do not need it.
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		// The default reconciler publishes 127.0.0.1 as the endpoint of the
		// kubernetes service, which validation rejects (loopback): noise.
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Dir(f.certFile),
		"--v=1",
	}
}

var errPortInUse = errors.New("apiserver port already in use")

type apiserverProc struct {
	port   int
	cmd    *exec.Cmd
	log    *os.File
	logDir string
	exited chan struct{}
	err    error // set before exited is closed
}

func startAPIServer(bin, dir string, args []string) (*apiserverProc, error) {
	logPath := filepath.Join(dir, "kube-apiserver.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create apiserver log: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Dir = dir
	setProcAttrs(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &apiserverProc{cmd: cmd, log: logf, logDir: dir, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// waitReady polls /readyz until it answers ok, the process exits, or ctx ends.
func (p *apiserverProc) waitReady(ctx context.Context, rc rest.Interface) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		probeCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		body, err := rc.Get().AbsPath("/readyz").DoRaw(probeCtx)
		cancel()
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			return nil
		}
		last = err
		select {
		case <-p.exited:
			tail := p.logTail()
			if strings.Contains(tail, "address already in use") {
				return errPortInUse
			}
			return fmt.Errorf("kube-apiserver exited before ready (%v); log tail:\n%s", p.err, tail)
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready (last /readyz error: %v): %w; log tail:\n%s", last, ctx.Err(), p.logTail())
		case <-tick.C:
		}
	}
}

// logTail returns the last lines of the apiserver log for error messages.
// The log holds no credentials: the apiserver never logs bearer tokens.
func (p *apiserverProc) logTail() string {
	data, err := os.ReadFile(filepath.Join(p.logDir, "kube-apiserver.log"))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// stop kills the apiserver's process group. SIGKILL, not SIGTERM: the data
// is thrown away, and a graceful apiserver shutdown only adds seconds.
func (p *apiserverProc) stop() {
	defer p.log.Close()
	select {
	case <-p.exited:
		// Reaped: its pid (and so the group id) may already be reused.
		return
	default:
	}
	signalGroup(p.cmd, syscall.SIGKILL)
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		// Unkillable (e.g. stuck in the kernel): give up rather than hang
		// the test binary; Pdeathsig still covers the exit of this process.
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func restConfig(port int, f apiserverFiles) *rest.Config {
	return &rest.Config{
		Host:            "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		BearerToken:     f.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: f.cert.certPEM},
		QPS:             -1, // no client-side throttling in tests
		// The apiserver's warnings (e.g. a pod named after a Node with dots in its
		// name, as a kubelet registering with its FQDN makes) are not failures.
		WarningHandler: rest.NoWarnings{},
	}
}

func newKube(cfg *rest.Config, client clientCert) (*Kube, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("build clientset: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("build dynamic client: %w", err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testenv"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[adminUser] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken,
		ClientCertificateData: client.certPEM, ClientKeyData: client.keyPEM}
	kc.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: adminUser, Namespace: "default"}
	kc.CurrentContext = "testenv"
	kcBytes, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("encode kubeconfig: %w", err)
	}
	return &Kube{Client: cs, Dynamic: dyn, RESTConfig: cfg, Kubeconfig: kcBytes}, nil
}

// installBase creates the flux-system namespace and waits until the Flux
// CRDs (created during start-up) serve without delay.
func installBase(ctx context.Context, k *Kube) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: FluxNamespace}}
	if _, err := k.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", FluxNamespace, err)
	}
	return waitFluxCRDs(ctx, k.Dynamic)
}
