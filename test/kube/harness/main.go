// Command kube-harness runs a real kube-apiserver and an embedded etcd in one
// process, on loopback only, for provider-proxmox's Kubernetes tests.
//
// It is test-only tooling: the product is TypeScript. On start it generates a
// CA, a serving certificate, a service-account signing key and an admin token
// in its data directory, starts etcd on 127.0.0.1, starts kube-apiserver on
// 127.0.0.1 with RBAC authorization, writes an admin kubeconfig, waits for
// /readyz and prints one line on stdout:
//
//	READY https://127.0.0.1:PORT
//
// Everything else (apiserver and etcd logs) goes to stderr. SIGTERM or SIGINT
// shut both servers down cleanly; exit status 0 means a clean stop.
//
// Flags mirror controller-runtime's envtest where they overlap; anything not
// covered can be passed through with --apiserver-arg (repeatable).
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/server/flagz"
	"k8s.io/client-go/rest"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

type config struct {
	dataDir        string
	securePort     int
	etcdClientPort int
	etcdPeerPort   int
	kubeconfig     string
	adminToken     string
	verbosity      int
	startTimeout   time.Duration
	stopTimeout    time.Duration
	serviceCIDR    string
	apiserverArgs  stringList
	keepDataDir    bool
	etcdLogLevel   string
	etcdUnsafeSync bool

	quietEtcd func()
}

func main() {
	os.Exit(run())
}

func run() int {
	var c config
	fs := flag.NewFlagSet("kube-harness", flag.ContinueOnError)
	fs.StringVar(&c.dataDir, "data-dir", "", "directory for etcd data, certificates, keys and tokens (default: a new temporary directory, removed on exit)")
	fs.IntVar(&c.securePort, "secure-port", 0, "kube-apiserver HTTPS port on 127.0.0.1 (0: a free port)")
	fs.IntVar(&c.etcdClientPort, "etcd-client-port", 0, "embedded etcd client port on 127.0.0.1 (0: a free port)")
	fs.IntVar(&c.etcdPeerPort, "etcd-peer-port", 0, "embedded etcd peer port on 127.0.0.1 (0: a free port)")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "where to write the admin kubeconfig (default: <data-dir>/admin.kubeconfig)")
	fs.StringVar(&c.adminToken, "admin-token", "", "bearer token of the admin user (group system:masters); default: random")
	fs.IntVar(&c.verbosity, "v", 0, "kube-apiserver log verbosity (klog -v)")
	fs.DurationVar(&c.startTimeout, "start-timeout", 2*time.Minute, "give up if /readyz is not ok within this time")
	fs.DurationVar(&c.stopTimeout, "stop-timeout", 30*time.Second, "force exit if a clean stop takes longer than this")
	fs.StringVar(&c.serviceCIDR, "service-cluster-ip-range", "10.0.0.0/24", "service cluster IP range")
	fs.Var(&c.apiserverArgs, "apiserver-arg", "extra kube-apiserver flag, e.g. --apiserver-arg=--feature-gates=Foo=true (repeatable; applied last)")
	fs.BoolVar(&c.keepDataDir, "keep-data-dir", false, "do not remove a temporary data directory on exit")
	fs.StringVar(&c.etcdLogLevel, "etcd-log-level", "warn", "embedded etcd log level (debug, info, warn, error)")
	fs.BoolVar(&c.etcdUnsafeSync, "etcd-unsafe-no-fsync", true, "disable fsync in etcd (test data only; faster)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: kube-harness [flags]\n\nRuns kube-apiserver %s and embedded etcd on loopback; prints \"READY <url>\" when /readyz is ok.\n\n", "v1.36")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "kube-harness: unexpected arguments %q\n", fs.Args())
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	if err := serve(ctx, &c); err != nil {
		fmt.Fprintf(os.Stderr, "kube-harness: %v\n", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, c *config) (retErr error) {
	start := time.Now()

	// Data directory.
	removeDir := false
	if c.dataDir == "" {
		d, err := os.MkdirTemp("", "kube-harness-")
		if err != nil {
			return err
		}
		c.dataDir = d
		removeDir = !c.keepDataDir
	} else if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
		return err
	}
	if removeDir {
		defer os.RemoveAll(c.dataDir)
	}
	if c.kubeconfig == "" {
		c.kubeconfig = filepath.Join(c.dataDir, "admin.kubeconfig")
	}
	if c.adminToken == "" {
		c.adminToken = randomHex(24)
	}

	// Bind the apiserver listener now: no port race, and the port is known
	// for the service-account issuer URL.
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.securePort)))
	if err != nil {
		return fmt.Errorf("listen for kube-apiserver: %w", err)
	}
	apiPort := ln.Addr().(*net.TCPAddr).Port
	apiURL := fmt.Sprintf("https://127.0.0.1:%d", apiPort)

	// Certificates, keys, tokens.
	pki, err := writePKI(c.dataDir, c.adminToken)
	if err != nil {
		ln.Close()
		return fmt.Errorf("generate certificates: %w", err)
	}

	// Embedded etcd.
	etcdSrv, etcdURL, err := startEtcd(ctx, c)
	if err != nil {
		ln.Close()
		return err
	}
	etcdStopped := false
	stopEtcd := func() {
		if !etcdStopped {
			etcdStopped = true
			if c.quietEtcd != nil {
				c.quietEtcd()
			}
			etcdSrv.Close()
		}
	}
	defer stopEtcd()
	klog.InfoS("kube-harness: etcd ready", "url", etcdURL, "elapsed", time.Since(start).Round(time.Millisecond))

	// kube-apiserver.
	args := []string{
		"--advertise-address=127.0.0.1",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--etcd-servers=" + etcdURL,
		"--tls-cert-file=" + pki.servingCert,
		"--tls-private-key-file=" + pki.servingKey,
		"--client-ca-file=" + pki.caCert,
		"--token-auth-file=" + pki.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=" + apiURL,
		"--service-account-key-file=" + pki.saKey,
		"--service-account-signing-key-file=" + pki.saKey,
		"--service-cluster-ip-range=" + c.serviceCIDR,
		"--allow-privileged=true",
		// No kube-controller-manager runs: the ServiceAccount admission plugin
		// would reject pods for lack of a default service account (envtest does the same).
		"--disable-admission-plugins=ServiceAccount",
		// The lease reconciler would try to publish 127.0.0.1 as the endpoint
		// of the "kubernetes" service, which endpoint validation rejects.
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Join(c.dataDir, "apiserver-certs"),
		"--v=" + strconv.Itoa(c.verbosity),
	}
	args = mergeArgs(args, c.apiserverArgs)

	apiCtx, cancelAPI := context.WithCancel(ctx)
	defer cancelAPI()
	apiDone := make(chan error, 1)
	if err := startAPIServer(apiCtx, args, ln, apiDone); err != nil {
		ln.Close()
		return fmt.Errorf("kube-apiserver: %w", err)
	}

	// Once the apiserver goroutine is running, every exit path waits for it.
	defer func() {
		cancelAPI()
		select {
		case err := <-apiDone:
			if err != nil && retErr == nil {
				retErr = fmt.Errorf("kube-apiserver stopped with: %w", err)
			}
		case <-time.After(c.stopTimeout):
			fmt.Fprintf(os.Stderr, "kube-harness: kube-apiserver did not stop within %s; exiting\n", c.stopTimeout)
			if removeDir {
				os.RemoveAll(c.dataDir)
			}
			os.Exit(1)
		}
		stopEtcd()
		klog.Flush()
	}()

	if err := writeKubeconfig(c.kubeconfig, apiURL, pki.caPEM, c.adminToken); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}

	if err := waitReady(ctx, apiURL, pki.caPEM, c.adminToken, c.startTimeout, apiDone); err != nil {
		return err
	}
	klog.InfoS("kube-harness: kube-apiserver ready", "url", apiURL, "kubeconfig", c.kubeconfig, "elapsed", time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(os.Stdout, "READY %s\n", apiURL)
	_ = os.Stdout.Sync()

	select {
	case <-ctx.Done():
		klog.InfoS("kube-harness: stopping")
		return nil
	case err := <-apiDone:
		// Put it back for the deferred wait.
		apiDone <- err
		if err == nil {
			return errors.New("kube-apiserver exited unexpectedly")
		}
		return nil
	}
}

// startAPIServer does what kube-apiserver's cobra command does, but with our
// context (no global signal handler) and our pre-bound listener.
func startAPIServer(ctx context.Context, args []string, ln net.Listener, done chan<- error) error {
	s := options.NewServerRunOptions()
	featureGate := s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)

	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	namedFlagSets := s.Flags()
	s.Flagz = flagz.NamedFlagSetsReader{FlagSets: namedFlagSets}
	for _, f := range namedFlagSets.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	// kube-apiserver's loopback clients should not log self-issued warnings.
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	if err := logsapi.ValidateAndApply(s.Logs, featureGate); err != nil {
		return err
	}

	s.SecureServing.Listener = ln
	s.SecureServing.BindPort = ln.Addr().(*net.TCPAddr).Port

	completed, err := s.Complete(ctx)
	if err != nil {
		return err
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return utilerrors.NewAggregate(errs)
	}
	featureGate.(featuregate.MutableFeatureGate).AddMetrics()
	s.GenericServerRunOptions.ComponentGlobalsRegistry.AddMetrics()

	go func() { done <- app.Run(ctx, completed) }()
	return nil
}

func startEtcd(ctx context.Context, c *config) (*embed.Etcd, string, error) {
	clientPort, err := freePort(c.etcdClientPort)
	if err != nil {
		return nil, "", err
	}
	peerPort, err := freePort(c.etcdPeerPort)
	if err != nil {
		return nil, "", err
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(clientPort))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))}

	cfg := embed.NewConfig()
	cfg.Name = "kube-harness"
	cfg.Dir = filepath.Join(c.dataDir, "etcd")
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	level, err := zap.ParseAtomicLevel(c.etcdLogLevel)
	if err != nil {
		return nil, "", fmt.Errorf("--etcd-log-level: %w", err)
	}
	zcfg := zap.NewProductionConfig()
	zcfg.Level = level
	zcfg.OutputPaths = []string{"stderr"}
	zcfg.ErrorOutputPaths = []string{"stderr"}
	zcfg.Sampling = nil
	zcfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	lg, err := zcfg.Build()
	if err != nil {
		return nil, "", err
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg.Named("etcd"))
	cfg.LogLevel = c.etcdLogLevel
	cfg.UnsafeNoFsync = c.etcdUnsafeSync
	// Closing the embedded server makes its accept loops log errors such as
	// "use of closed network connection"; that is the normal way it stops.
	c.quietEtcd = func() { level.SetLevel(zapcore.FatalLevel) }

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("start etcd: %w", err)
	}
	timeout := time.NewTimer(c.startTimeout)
	defer timeout.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return e, clientURL.String(), nil
	case err := <-e.Err():
		e.Close()
		return nil, "", fmt.Errorf("etcd: %w", err)
	case <-timeout.C:
		e.Close()
		return nil, "", fmt.Errorf("etcd not ready within %s", c.startTimeout)
	case <-ctx.Done():
		e.Close()
		return nil, "", errors.New("interrupted while starting etcd")
	}
}

// mergeArgs appends extra flags to the defaults; a default whose flag name an
// extra flag repeats is dropped, so --apiserver-arg overrides rather than adds
// (slice flags such as --authorization-mode would otherwise accumulate).
func mergeArgs(defaults, extra []string) []string {
	name := func(a string) string {
		a = strings.TrimLeft(a, "-")
		if i := strings.IndexByte(a, '='); i >= 0 {
			a = a[:i]
		}
		return a
	}
	overridden := map[string]bool{}
	for _, a := range extra {
		overridden[name(a)] = true
	}
	out := make([]string, 0, len(defaults)+len(extra))
	for _, a := range defaults {
		if !overridden[name(a)] {
			out = append(out, a)
		}
	}
	return append(out, extra...)
}

// freePort returns want if non-zero, else a port that was free a moment ago.
func freePort(want int) (int, error) {
	if want != 0 {
		return want, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitReady(ctx context.Context, apiURL string, caPEM []byte, token string, timeout time.Duration, apiDone chan error) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	last := "no answer yet"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, apiURL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err == nil {
			buf := make([]byte, 4096)
			n, _ := resp.Body.Read(buf)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(buf[:n])))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver /readyz not ok within %s; last answer: %s", timeout, last)
		}
		select {
		case <-ctx.Done():
			return errors.New("interrupted while waiting for kube-apiserver")
		case err := <-apiDone:
			apiDone <- err
			return fmt.Errorf("kube-apiserver exited before ready: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

type pkiFiles struct {
	caCert, servingCert, servingKey, saKey, tokenFile string
	caPEM                                             []byte
}

func writePKI(dir, adminToken string) (*pkiFiles, error) {
	p := &pkiFiles{
		caCert:      filepath.Join(dir, "ca.crt"),
		servingCert: filepath.Join(dir, "apiserver.crt"),
		servingKey:  filepath.Join(dir, "apiserver.key"),
		saKey:       filepath.Join(dir, "sa.key"),
		tokenFile:   filepath.Join(dir, "tokens.csv"),
	}
	now := time.Now().Add(-time.Hour)
	notAfter := now.Add(10 * 365 * 24 * time.Hour)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "kube-harness-ca"},
		NotBefore:             now,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}

	if err := os.WriteFile(p.caCert, p.caPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.servingCert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}), 0o644); err != nil {
		return nil, err
	}
	if err := writeECKey(p.servingKey, srvKey); err != nil {
		return nil, err
	}
	if err := writeECKey(p.saKey, saKey); err != nil {
		return nil, err
	}
	// token,user,uid,"group1,group2"
	tokens := fmt.Sprintf("%s,kube-harness-admin,kube-harness-admin,\"system:masters\"\n", adminToken)
	if err := os.WriteFile(p.tokenFile, []byte(tokens), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

func writeECKey(path string, k *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

func writeKubeconfig(path, apiURL string, caPEM []byte, token string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kube-harness
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: kube-harness-admin
  user:
    token: %s
contexts:
- name: kube-harness
  context:
    cluster: kube-harness
    user: kube-harness-admin
    namespace: default
current-context: kube-harness
`, apiURL, base64.StdEncoding.EncodeToString(caPEM), token)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(kc), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err)
	}
	return n
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
