package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fedpq/fedpq/data"
	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/transport"
)

func init() {
	commands["server"] = command{
		summary: "serve a federated run to fedpq clients over gRPC",
		run:     runServer,
	}
	commands["client"] = command{
		summary: "take part in a fedpq server's run with this machine's data",
		run:     runClient,
	}
	commands["keygen"] = command{
		summary: "make a client's identity key and print its roster line",
		run:     runKeygen,
	}
}

const serverDescription = `Runs a federated training run for clients in other processes or on other
machines (fedpq client). Each round the server chooses clients among those
connected, sends them the global model and the clipping ranges, relays the
signed X25519 key shares with which partners set up the bits they share (the
server never sees them), collects the encoded uploads until all are in or the
round's deadline, aggregates them, evaluates, checkpoints, and writes the same
metrics.jsonl and summary.json as fedpq run.

The run's settings are those of fedpq run, a YAML file (--config) and flags,
but for the simulation's own (dropout, shuffle, data, client_column,
workers), which the server refuses as flags.
Where the run partitions a shared dataset, the server reads the dataset's
test set and training labels (--data-dir), not its training images (but
the examples --validation holds out), and each client holds its own
partition. Where the
clients bring their own data (--test-data), the server reads only the
evaluation set (and --validation-data), fixes the schema every client's data
must fit (classes, shape, a CSV's columns) and sends it to the clients in the
run's configuration; it never reads a client's data (docs/data.md). Clients must present the join token (--token, or $FEDPQ_TOKEN)
or be on the roster (--roster, lines made by fedpq keygen). If the run
directory holds a checkpoint of the same configuration, the server resumes
after its round; the clients reconnect by themselves.

With --mode async (FedBuff) the server keeps --concurrency clients training,
each from the model current when it was given its task; a client that
finishes says it is ready and holds its weights; every --buffer ready
clients form a buffer, a round among themselves (pairs, secure aggregation,
dropouts and the deadline as above) in which each encodes against the model
it trained from, and the server steps. Weights staler than --max-staleness
steps are refused before they are sent (docs/training.md#deployed).
`

func runServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("server", "--config FILE.yaml --listen ADDR [flags]", serverDescription, stderr)
	c := experiment.Default()
	fs.String("config", "", "YAML file of the run's settings (flags override it)")
	listen := fs.String("listen", "127.0.0.1:7070", "address to listen on (host:port; :7070 for every interface)")
	minClients := fs.Int("min-clients", 0, "clients connected before a round starts (0: all, for up to --grace)")
	gather := fs.Duration("gather", 5*time.Second, "once min-clients are connected, how long to wait for the others")
	grace := fs.Duration("grace", 2*time.Minute, "with min-clients 0, how long a round waits for missing clients before it goes on at once with those connected (with none, it waits for the first, then --gather for the rest)")
	maxWait := fs.Duration("max-wait", 0, "how long a round waits for the clients it needs (min-clients; with min-clients 0, after --grace, a first one) before the server stops with an error naming who is missing, its checkpoint kept (0: for ever)")
	timeout := fs.Duration("round-timeout", 10*time.Minute, "deadline of each round: it ends with the uploads it has")
	taskTimeout := fs.Duration("task-timeout", 0, "mode async: how long a client given a task has to train and say ready; then the task is withdrawn, the client told, and its slot given to another client (0: --round-timeout)")
	keyShares := fs.Duration("key-share-timeout", 30*time.Second, "how long a paired client has to send its key share before its partner encodes alone (at most half the round)")
	joinTimeout := fs.Duration("join-timeout", 10*time.Second, "how long a connection has to join before it is closed")
	token := fs.String("token", "", "join token clients must present (default $FEDPQ_TOKEN)")
	rosterPath := fs.String("roster", "", "file of enrolled clients' identity keys (fedpq keygen prints the lines)")
	cert := fs.String("tls-cert", "", "TLS certificate (PEM; fedpq cert writes one, server.pem), holding every name and address clients dial; without it the connection is not encrypted")
	key := fs.String("tls-key", "", "TLS private key (PEM; fedpq cert's server.key)")
	format := fs.String("format", "text", "output: text or json (the summary)")
	metricsAddr := fs.String("metrics", "", metricsHelp)
	stay := fs.Bool("linger", false, "once the run is over (or found over when started), stay up until told to stop (SIGTERM or SIGINT), then exit 0, serving --metrics (/healthz 200, /readyz 503: the run is over): for a Kubernetes Deployment, which restarts a server that exits")
	if path := findConfig(args); path != "" {
		if err := loadConfig(path, &c); err != nil {
			return err
		}
		if c.Name == experiment.Default().Name {
			c.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		}
	}
	if err := bindConfig(fs, &c, notServed); err != nil {
		return err
	}
	if err := refuseNotServed(args); err != nil {
		return err
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if c.TestData != "" && c.Name == experiment.Default().Name {
		// A run of clients' own data is named after the directory of its
		// test set (bc/test.csv: bc), as fedpq run names it after --data.
		c.Name = filepath.Base(filepath.Dir(filepath.Clean(c.TestData)))
		if c.Name == "." || c.Name == string(filepath.Separator) {
			c.Name = strings.TrimSuffix(filepath.Base(c.TestData), filepath.Ext(c.TestData))
		}
	}
	if *format != "text" && *format != "json" {
		return badValue{fmt.Errorf("--format %q: want text or json", *format)}
	}
	if err := c.Validate(); err != nil {
		return badValue{err}
	}
	if *token == "" {
		*token = os.Getenv("FEDPQ_TOKEN") // not the flag's default, which -h would print
	}
	logger := log.New(stderr, "fedpq server: ", log.LstdFlags)
	cfg := transport.ServerConfig{
		Run: c, MinClients: *minClients, Gather: *gather, Grace: *grace, MaxWait: *maxWait, RoundTimeout: *timeout, TaskTimeout: *taskTimeout,
		KeyShareTimeout: min(*keyShares, *timeout/2), JoinTimeout: *joinTimeout, Token: *token, Log: logger,
	}
	if *rosterPath != "" {
		r, err := transport.LoadRoster(*rosterPath)
		if err != nil {
			return err
		}
		cfg.Roster = r
	}
	switch {
	case *cert != "" && *key != "":
		pair, err := tls.LoadX509KeyPair(*cert, *key)
		if err != nil {
			return err
		}
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13}
	case *cert != "" || *key != "":
		return badValue{errors.New("--tls-cert and --tls-key go together")}
	default:
		logger.Printf("no --tls-cert: the join token and the uploads travel unencrypted; use TLS beyond a trusted network")
	}
	if *metricsAddr != "" {
		cfg.Metrics = transport.NewServerMetrics()
		stop, err := serveMonitor(*metricsAddr, cfg.Metrics, logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	srv, err := transport.NewServer(cfg)
	if fin := new(transport.FinishedError); errors.As(err, &fin) {
		// Nothing to do, which is not a failure: a restarted job whose run
		// is over ends as the run did. No summary is printed as if it ran.
		logger.Print(fin)
		cfg.Metrics.FoundFinished(c.Rounds, fin.Rounds)
		linger(ctx, *stay, logger)
		return nil
	}
	if err != nil {
		return err
	}
	checkFileLimit(c.Clients, logger)
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	s, err := srv.Serve(ctx, lis)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return nil // stopped as asked, its checkpoint kept: Serve logged where
		}
		return err
	}
	if err := printSummary(stdout, *format, c, s); err != nil {
		return err
	}
	linger(ctx, *stay, logger)
	return nil
}

// linger keeps a server whose run is over up until ctx ends (SIGTERM or
// SIGINT), where on (--linger): a Deployment restarts a container that
// exits, even with 0, and a server that ended its run would be started
// again and again (CrashLoopBackOff). Its /healthz stays 200, so liveness
// probes keep it; its /readyz says 503, so no Service sends clients to it.
func linger(ctx context.Context, on bool, logger *log.Logger) {
	if !on {
		return
	}
	logger.Printf("the run is over; staying up (--linger) until told to stop (SIGTERM or SIGINT)")
	<-ctx.Done()
	logger.Printf("told to stop: exiting")
}

const clientDescription = `Takes part in a fedpq server's run. The client connects, learns the run's
settings from the server, and loads its data: its own dataset (--data PATH,
read into the run's schema, which the server sends), or, where the run
partitions a shared dataset, its partition K of N of its copy in --data-dir
(the same partition fedpq run would give client K). Only its own examples stay
in memory. Then, each round it is chosen: trains from the global model, pairs up with its partner
(a signed X25519 key share relayed by the server), encodes its update with
the round's mechanism and uploads it. Its privacy coins and keys come from
its own randomness, which the server never sees. It reconnects by itself if
the server restarts, and exits when the run is over. With --trainer, local
training runs in the user's framework (docs/trainer.md); a round in which the
trainer fails (hangs past the round's deadline, exits, or returns what fedpq
refuses) is declined, and the trainer restarts for the next.

In a run with secure aggregation the client holds the server to its own
policy (--policy FILE.yaml, or the flags, which win): it declines a round
whose threshold or graph would let a server that deviates, with a fraction
--secagg-corrupt of the clients, learn more than the sum, a round of fewer
than --secagg-min-clients, a round of a secure run without secure
aggregation, and a round it answered before (recorded in --state, across
restarts). docs/security.md says what each protects against.

In an asynchronous run (the server's --mode async) the client trains when
the server gives it a task, says it is ready, and holds its weights until a
buffer asks for them, across reconnections and server restarts. --delay
makes a client a straggler in either mode, for tests and demos.
`

// clientPolicyFile is the YAML of fedpq client --policy: every key optional.
type clientPolicyFile struct {
	RequireSecureAggregation *bool    `yaml:"require_secure_aggregation"`
	Corrupt                  *float64 `yaml:"corrupt"`
	MinClients               *int     `yaml:"min_clients"`
}

// clientPolicy reads --policy, then lets the flags that were set win.
func clientPolicy(path string, set map[string]bool, require bool, corrupt float64, minClients int) (transport.ClientPolicy, error) {
	pol := transport.DefaultClientPolicy
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return pol, err
		}
		var f clientPolicyFile
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
			return pol, badValue{fmt.Errorf("%s: %w (keys: require_secure_aggregation, corrupt, min_clients)", path, err)}
		}
		if f.RequireSecureAggregation != nil {
			pol.RequireSecure = *f.RequireSecureAggregation
		}
		if f.Corrupt != nil {
			pol.SecAgg.Corrupt = *f.Corrupt
		}
		if f.MinClients != nil {
			pol.SecAgg.MinClients = *f.MinClients
		}
	}
	if set["require-secure-aggregation"] {
		pol.RequireSecure = require
	}
	if set["secagg-corrupt"] {
		pol.SecAgg.Corrupt = corrupt
	}
	if set["secagg-min-clients"] {
		pol.SecAgg.MinClients = minClients
	}
	if err := pol.SecAgg.Validate(); err != nil {
		return pol, badValue{err}
	}
	return pol, nil
}

func runClient(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("client", "--server ADDR (--data PATH [--client K] | --partition K/N | --partition A-B/N | --data DIR --clients A-B) [--block K --block-size S] [flags]", clientDescription+fleetDescription, stderr)
	server := fs.String("server", "127.0.0.1:7070", "the server's address (host:port)")
	own := fs.String("data", "", "this client's own dataset (docs/data.md: an ImageFolder, a CSV, an NPZ file, ...), for a run whose clients bring their own")
	ownFormat := fs.String("data-format", "", "the format of --data: imagefolder, csv, npz, npy, idx or cifar (default: the run's data_format, else from the path)")
	id := fs.Int("client", -1, "with --data: this client's id K, 0 <= K < N (default: K of --data named client-K, as fedpq split names them)")
	partition := fs.String("partition", "", "this client's partition of a shared dataset: K/N, client K of the run's N (0 <= K < N); A-B/N runs clients A to B in this process")
	fleetIDs := fs.String("clients", "", "with --data DIR: run clients A to B (A-B) in this process, client K reading DIR/client-K (as fedpq split writes them)")
	block := fs.Int("block", -1, "with a fleet's range (--partition A-B/N, --clients A-B) and --block-size S: run only block K of it, its clients K*S to K*S+S-1 counted from the range's first, such as --block=$(JOB_COMPLETION_INDEX) in a Kubernetes Indexed Job")
	blockSize := fs.Int("block-size", 0, "with --block: the clients in a block (the last block of the range may have fewer)")
	workers := fs.Int("workers", 0, "with several clients: how many train or encode at once, each with a model of its own (0: the cores Go uses)")
	dataDir := fs.String("data-dir", "", "with --partition: directory of the dataset files (default $FEDPQ_DATA, else ./data)")
	keyPath := fs.String("key", "", "identity key (fedpq keygen); default: client-K-of-N.key (client-K.key with --data) in the user's config directory (fedpq/), made on first use. With several clients: the directory of their keys, under those names")
	token := fs.String("token", "", "the server's join token (default $FEDPQ_TOKEN)")
	rosterPath := fs.String("roster", "", "roster file: check partners' key shares against it, not against the server's word")
	ca := fs.String("tls-ca", "", "CA certificate (PEM) to check the server's TLS certificate with (fedpq cert's ca.pem)")
	useTLS := fs.Bool("tls", false, "use TLS with the system's CAs")
	serverName := fs.String("tls-server-name", "", "name to check the server's certificate against, where --server dials another (an address, a port-forward); default: the host of --server")
	seed := fs.String("seed", "", "seed the client's randomness (tests only: a deployment draws it from the system)")
	byzantine := fs.String("byzantine", "", "attack as a Byzantine client, within the support, for tests and red-teaming: sign-flip, scale:S, label-flip, constant or extreme (docs/security.md); every client of the process attacks, and the server is not told")
	delayFlag := fs.String("delay", "", "wait this long after training before saying ready (mode async) or uploading (mode sync, within the round's deadline), to make real stragglers for tests and demos: fixed:S (S seconds), lognormal:MEDIAN_S:SIGMA (each task's wait lognormal), or tail:F:X:S (the fraction F of the run's clients, the lowest ids, X times slower: X*S seconds, the others S; as fedpq run's --speed tail:F:X); default none")
	retry := fs.Duration("retry-for", 5*time.Minute, "how long to keep reconnecting to a lost server")
	statePath := fs.String("state", "", "file recording the rounds this client answered and each run's beacon, across restarts; default: client-K-of-N.state (client-K.state with --data) beside the default key. With several clients: the directory of their state files")
	policyPath := fs.String("policy", "", "YAML file of the client's policy: require_secure_aggregation, corrupt, min_clients (the flags win)")
	require := fs.Bool("require-secure-aggregation", false, "refuse a run without secure aggregation")
	corrupt := fs.Float64("secagg-corrupt", transport.DefaultClientPolicy.SecAgg.Corrupt, "fraction of a round's clients that may collude with the server, which a secure round's threshold and graph must withstand")
	minClients := fs.Int("secagg-min-clients", transport.DefaultClientPolicy.SecAgg.MinClients, "fewest clients a secure round may have")
	trainer := fs.String("trainer", "", "command line of this client's external trainer, which trains its model in the user's framework, e.g. '/usr/bin/python3 python/examples/mnist_cnn2.py' (docs/trainer.md); a run with model external needs one. The client never runs a command the server sends")
	trainerTimeout := fs.Duration("trainer-timeout", 0, "longest the external trainer may take to answer a request (0: 10m; its start has at least 1m); a round's deadline bounds its training too")
	trainerThreads := fs.Int("trainer-threads", 0, "threads the external trainer uses (0: all of this machine's cores)")
	metricsAddr := fs.String("metrics", "", metricsHelp)
	if err := parse(fs, args); err != nil {
		return err
	}
	ids, err := fleetRange(*own, *id, *partition, *fleetIDs)
	if err == nil {
		ids, err = fleetBlock(ids, *block, *blockSize)
	}
	if err != nil {
		return badValue{err}
	}
	k, n, err := 0, 0, error(nil)
	if ids == nil {
		k, n, err = clientID(*own, *id, *partition)
	} else if *own == "" {
		_, n, err = parseRangeFlag(*partition)
	}
	if err != nil {
		return badValue{err}
	}
	if *ownFormat != "" {
		if _, err := data.ParseFormat(*ownFormat); err != nil {
			return badValue{err}
		}
	}
	attack, err := fl.ParseAttack(*byzantine)
	if err != nil {
		return badValue{err}
	}
	delay, err := transport.ParseDelay(*delayFlag)
	if err != nil {
		return badValue{err}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	policy, err := clientPolicy(*policyPath, set, *require, *corrupt, *minClients)
	if err != nil {
		return err
	}
	if *token == "" {
		*token = os.Getenv("FEDPQ_TOKEN")
	}
	logger := log.New(stderr, fmt.Sprintf("fedpq client %d: ", k), log.LstdFlags)
	cfg := transport.ClientConfig{
		Server: *server, ID: k, Clients: n, DataDir: *dataDir, Data: *own, DataFormat: *ownFormat, Token: *token, RetryFor: *retry, Log: logger,
		Policy: policy, State: *statePath, Trainer: *trainer, TrainerTimeout: *trainerTimeout, TrainerThreads: *trainerThreads,
		Byzantine: attack, Delay: delay,
	}
	if err := clientCreds(&cfg, *ca, *useTLS, *serverName); err != nil {
		return err
	}
	if *rosterPath != "" {
		if cfg.Roster, err = transport.LoadRoster(*rosterPath); err != nil {
			return err
		}
	}
	if *metricsAddr != "" {
		cfg.Metrics = transport.NewClientMetrics() // one for all the process's clients
		stop, err := serveMonitor(*metricsAddr, cfg.Metrics, logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	if ids != nil {
		return runFleet(ctx, cfg, ids, fleetFiles{dir: *own, key: *keyPath, state: *statePath, seed: *seed}, *workers, stdout, stderr)
	}
	if cfg.State == "" {
		if cfg.State, err = clientFile(k, n, "state"); err != nil {
			logger.Printf("no --state and no config directory (%v): the rounds answered are remembered by this process only", err)
		}
	}
	if cfg.Key, err = clientKey(*keyPath, k, n, logger); err != nil {
		return err
	}
	if *seed != "" {
		v, err := strconv.ParseUint(*seed, 10, 64)
		if err != nil {
			return badValue{fmt.Errorf("--seed %q: %w", *seed, err)}
		}
		cfg.Secret = binary.LittleEndian.AppendUint64([]byte("fedpq client seed "), v)
	}
	cl, err := transport.NewClient(cfg)
	if err != nil {
		return err
	}
	fin, err := cl.Run(ctx)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			logger.Printf("told to stop (SIGTERM or SIGINT): left the run; the server goes on without this client, and the same command joins it again")
			return nil
		}
		return err
	}
	fmt.Fprintf(stdout, "run finished after %d rounds\n", fin.GetRounds())
	return nil
}

// clientCreds sets cfg's transport credentials: TLS with the CA at ca
// (or the system's, with useTLS), else none.
func clientCreds(cfg *transport.ClientConfig, ca string, useTLS bool, serverName string) error {
	if ca == "" && !useTLS {
		cfg.Creds = insecure.NewCredentials()
		return nil
	}
	tc := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS13}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return err
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s: no PEM certificate", ca)
		}
	}
	cfg.Creds = credentials.NewTLS(tc)
	return nil
}

// clientKey loads the identity key at path, or, without one, the client's
// default key for partition K of N, made on first use: a token-mode server
// pins an id to the first key that joins as it, so a client that restarts
// must come back with the same key.
func clientKey(path string, k, n int, logger *log.Logger) (ed25519.PrivateKey, error) {
	if path != "" {
		return transport.LoadKey(path)
	}
	path, err := clientFile(k, n, "key")
	if err != nil {
		logger.Printf("no --key and no config directory (%v): a new identity key for this process only", err)
		return transport.NewKey(), nil
	}
	key, made, err := loadOrMakeKey(path)
	if made {
		logger.Printf("made an identity key for client %d in %s (roster line: %d %s)", k, path, k, transport.PublicString(key))
	}
	return key, err
}

// loadOrMakeKey loads the identity key at path, or makes it there if
// there is none (made true).
func loadOrMakeKey(path string) (key ed25519.PrivateKey, made bool, err error) {
	if key, err := transport.LoadKey(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, err
	}
	key = transport.NewKey()
	if err := transport.SaveKey(path, key); err != nil {
		return nil, false, err
	}
	return key, true, nil
}

// clientFile is client K of N's file of the given kind in the user's
// config directory: fedpq/client-K-of-N.KIND, or fedpq/client-K.KIND for a
// client with its own data (N 0: it learns N from the server).
func clientFile(k, n int, kind string) (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "fedpq", clientName(k, n, kind)), nil
}

// clientName is client K of N's file name of the given kind:
// client-K-of-N.KIND, or client-K.KIND with its own data (N 0).
func clientName(k, n int, kind string) string {
	if n == 0 {
		return fmt.Sprintf("client-%d.%s", k, kind)
	}
	return fmt.Sprintf("client-%d-of-%d.%s", k, n, kind)
}

// clientID is the client's id K and, with a partition, the run's N (0
// with its own data: the server says): from --partition K/N, or from
// --client or the name of --data.
func clientID(own string, id int, partition string) (k, n int, err error) {
	switch {
	case own != "" && partition != "":
		return 0, 0, errors.New("--data and --partition: a client trains on its own data or on a partition of a shared dataset, not both")
	case own == "" && id >= 0:
		return 0, 0, errors.New("--client goes with --data; with a partition of a shared dataset give --partition K/N")
	case own == "":
		return parsePartitionFlag(partition)
	case id >= 0:
		return id, 0, nil
	}
	k, ok := data.ClientNumber(filepath.Base(filepath.Clean(own)))
	if !ok {
		return 0, 0, fmt.Errorf("--data %s: give the client's id with --client K (it is not named client-K)", own)
	}
	return k, 0, nil
}

// parsePartitionFlag reads K/N.
func parsePartitionFlag(s string) (k, n int, err error) {
	a, b, ok := strings.Cut(s, "/")
	if ok {
		k, err = strconv.Atoi(a)
		if err == nil {
			n, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || n < 1 || k < 0 || k >= n {
		return 0, 0, fmt.Errorf("--partition %q: want K/N with 0 <= K < N, such as 3/8", s)
	}
	return k, n, nil
}

const keygenDescription = `Makes a client's Ed25519 identity key, writes it to --key (readable by its
owner only) and prints the client's roster line: "K PUBLIC-KEY". Collect the
lines in a roster file; the server admits only the clients on it (--roster),
and clients given the roster check that the X25519 key shares the server
relays were signed by their partner.
`

func runKeygen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("keygen", "--client K --key FILE", keygenDescription, stderr)
	client := fs.Int("client", -1, "the client id (its partition K) the key is enrolled for")
	path := fs.String("key", "", "file to write the private key to (must not exist)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *client < 0 || *path == "" {
		fs.Usage()
		return errUsage
	}
	k := transport.NewKey()
	if err := transport.SaveKey(*path, k); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("--key %s already exists: keygen never overwrites a key (its public half may be on a roster); give another --key, or delete %s to replace it", *path, *path)
		}
		return err
	}
	fmt.Fprintf(stdout, "%d %s\n", *client, transport.PublicString(k))
	return nil
}
