package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fedpq/fedpq/data"
	"github.com/fedpq/fedpq/transport"
)

const fleetDescription = `
Many clients in one process (a fleet): --partition A-B/N runs clients A to B
of the run's N, --data DIR --clients A-B runs clients A to B of a directory
that fedpq split wrote, client K reading DIR/client-K (the directory may
hold only the fleet's own clients' entries). Each client keeps its
own identity key, randomness, state file and connection; they share the
model, a shared dataset read once, and --workers models that train and
encode in turn. The fleet logs a summary line every 10 s rather than a line
per client per round. --key and --state name directories then.

--block K --block-size S runs only block K of the range: its clients K*S to
K*S+S-1, counted from the range's first (the last block is shorter where S
does not divide the range). It is for orchestrators that number their
workers but compute nothing in a container's arguments: every pod of a
Kubernetes Indexed Job gets the same range and --block=$(JOB_COMPLETION_INDEX),
every task of a Slurm array --block $SLURM_ARRAY_TASK_ID.
`

// fleetRange is the clients a fleet runs (nil for one client alone): A-B
// of --partition A-B/N, or of --clients A-B with --data DIR.
func fleetRange(own string, id int, partition, clients string) ([]int, error) {
	switch {
	case clients != "" && (own == "" || id >= 0):
		return nil, errors.New("--clients A-B goes with --data DIR, a directory of clients' data (client-K entries, as fedpq split writes them), and without --client")
	case clients != "":
		return parseRange("--clients", clients)
	case own == "" && strings.Contains(partition, "-"):
		ids, _, err := parseRangeFlag(partition)
		return ids, err
	}
	return nil, nil
}

// fleetBlock is block k of size size of a fleet's range ids (--block K
// --block-size S; k < 0 and size 0: not given, the whole range).
func fleetBlock(ids []int, k, size int) ([]int, error) {
	switch {
	case k < 0 && size == 0:
		return ids, nil
	case k < 0 || size < 1:
		return nil, errors.New("--block K and --block-size S go together, K >= 0 and S >= 1: block K of a fleet's range is its clients K*S to K*S+S-1")
	case ids == nil:
		return nil, errors.New("--block goes with a fleet's range: --partition A-B/N, or --data DIR --clients A-B")
	}
	blocks := (len(ids) + size - 1) / size
	if k >= blocks {
		return nil, fmt.Errorf("--block %d --block-size %d: the range %d-%d (%d clients) has blocks 0 to %d", k, size, ids[0], ids[len(ids)-1], len(ids), blocks-1)
	}
	return ids[k*size : min((k+1)*size, len(ids))], nil
}

// parseRangeFlag reads --partition A-B/N.
func parseRangeFlag(s string) (ids []int, n int, err error) {
	r, total, ok := strings.Cut(s, "/")
	if ok {
		n, err = strconv.Atoi(total)
	}
	if !ok || err != nil || n < 1 {
		return nil, 0, fmt.Errorf("--partition %q: want A-B/N with 0 <= A <= B < N, such as 0-99/1000", s)
	}
	if ids, err = parseRange("--partition", r); err != nil {
		return nil, 0, err
	}
	if ids[len(ids)-1] >= n {
		return nil, 0, fmt.Errorf("--partition %q: clients up to %d of %d (they are numbered 0 to %d)", s, ids[len(ids)-1], n, n-1)
	}
	return ids, n, nil
}

// parseRange reads A-B, 0 <= A <= B.
func parseRange(flag, s string) ([]int, error) {
	x, y, ok := strings.Cut(s, "-")
	a, err1 := strconv.Atoi(x)
	b, err2 := strconv.Atoi(y)
	if !ok || err1 != nil || err2 != nil || a < 0 || b < a {
		return nil, fmt.Errorf("%s %q: want A-B with 0 <= A <= B, such as 0-99", flag, s)
	}
	ids := make([]int, 0, b-a+1)
	for k := a; k <= b; k++ {
		ids = append(ids, k)
	}
	return ids, nil
}

// fleetFiles is where a fleet's clients find their files.
type fleetFiles struct {
	dir   string // --data DIR, or "" for partitions
	key   string // directory of identity keys ("": the config directory)
	state string // directory of state files ("": the config directory)
	seed  string // --seed: each client's randomness derives from it and its id
}

// runFleet runs the clients ids, each as base with its own id, data,
// key, state and randomness.
func runFleet(ctx context.Context, base transport.ClientConfig, ids []int, files fleetFiles, workers int, stdout, stderr io.Writer) error {
	logger := log.New(stderr, fmt.Sprintf("fedpq fleet %d-%d: ", ids[0], ids[len(ids)-1]), log.LstdFlags)
	checkFileLimit(len(ids), logger)
	var paths map[int]string
	if files.dir != "" {
		var err error
		if paths, err = fleetDataPaths(files.dir, ids); err != nil {
			return badValue{err}
		}
	}
	var seed uint64
	if files.seed != "" {
		v, err := strconv.ParseUint(files.seed, 10, 64)
		if err != nil {
			return badValue{fmt.Errorf("--seed %q: %w", files.seed, err)}
		}
		seed = v
	}
	keyDir, stateDir := files.key, files.state
	if conf, err := clientFile(0, 0, "key"); err == nil {
		keyDir, stateDir = orDefault(keyDir, filepath.Dir(conf)), orDefault(stateDir, filepath.Dir(conf))
	} else if keyDir == "" || stateDir == "" {
		logger.Printf("no --key or --state directory and no config directory (%v): new identity keys, and rounds answered remembered by this process only", err)
	}
	made := 0
	clients := make([]transport.ClientConfig, len(ids))
	for i, k := range ids {
		cc := base
		cc.ID = k
		if paths != nil {
			cc.Data = paths[k]
		}
		cc.Key, cc.State = transport.NewKey(), ""
		if keyDir != "" {
			key, isNew, err := loadOrMakeKey(filepath.Join(keyDir, clientName(k, base.Clients, "key")))
			if err != nil {
				return err
			}
			cc.Key = key
			if isNew {
				made++
			}
		}
		if stateDir != "" {
			cc.State = filepath.Join(stateDir, clientName(k, base.Clients, "state"))
		}
		if files.seed != "" {
			cc.Secret = binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64([]byte("fedpq fleet client seed "), seed), uint64(k))
		}
		clients[i] = cc
	}
	if made > 0 {
		logger.Printf("made %d identity keys in %s (%s ...)", made, keyDir, clientName(ids[0], base.Clients, "key"))
	}
	f, err := transport.NewFleet(transport.FleetConfig{Clients: clients, Workers: workers, Log: logger})
	if err != nil {
		return badValue{err}
	}
	res := f.Run(ctx)
	if res.Err != nil {
		return fmt.Errorf("%d of %d clients failed (%d finished); the first: %w", res.Failed, len(ids), res.Finished, res.Err)
	}
	noun := "clients"
	if res.Finished == 1 {
		noun = "client"
	}
	fmt.Fprintf(stdout, "run finished after %d rounds: %d %s\n", res.Rounds, res.Finished, noun)
	return nil
}

// orDefault is a, or b where a is empty.
func orDefault(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// fleetDataPaths finds each of a fleet's clients' datasets in dir: the
// entry client-K (with an extension or not, as fedpq split names them) of
// each of its ids. The directory may hold every client's data or only the
// fleet's own, such as a Kubernetes pod's directory of its block
// (deploy/kubernetes/overlays/client-data).
func fleetDataPaths(dir string, ids []int) (map[int]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	byK := map[int]string{}
	for _, e := range entries {
		k, ok := data.ClientNumber(e.Name())
		if !ok {
			continue
		}
		if prev, dup := byK[k]; dup {
			return nil, fmt.Errorf("data: %s: client %d is both %s and %s", dir, k, prev, e.Name())
		}
		byK[k] = e.Name()
	}
	paths := make(map[int]string, len(ids))
	for _, k := range ids {
		name, ok := byK[k]
		if !ok {
			return nil, fmt.Errorf("--clients %d-%d: %s has no client-%d (%d clients' entries)", ids[0], ids[len(ids)-1], dir, k, len(byK))
		}
		paths[k] = filepath.Join(dir, name)
	}
	return paths, nil
}
